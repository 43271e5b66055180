//! Stop strings for streamed text.

/// Holds back text that may be the start of a stop string, so a stop string is never
/// streamed, even in part.
pub struct StopFilter {
    stops: Vec<String>,
    pending: String,
}

impl StopFilter {
    pub fn new(stops: Vec<String>) -> Self {
        Self {
            stops,
            pending: String::new(),
        }
    }

    /// Adds text; returns what is safe to emit and whether a stop string was reached.
    pub fn push(&mut self, s: &str) -> (String, bool) {
        self.pending.push_str(s);
        let hit = self
            .stops
            .iter()
            .filter(|st| !st.is_empty())
            .filter_map(|st| self.pending.find(st.as_str()))
            .min();
        if let Some(at) = hit {
            let out = self.pending[..at].to_string();
            self.pending.clear();
            return (out, true);
        }
        // Keep the longest suffix that is a proper prefix of some stop string.
        let mut keep = 0;
        for st in &self.stops {
            for (i, _) in st.char_indices().skip(1) {
                if self.pending.ends_with(&st[..i]) {
                    keep = keep.max(i);
                }
            }
        }
        let cut = self.pending.len() - keep;
        let out = self.pending[..cut].to_string();
        self.pending.drain(..cut);
        (out, false)
    }

    /// What is still held back, at the end of generation.
    pub fn flush(&mut self) -> String {
        std::mem::take(&mut self.pending)
    }
}

#[cfg(test)]
mod tests {
    use super::StopFilter;

    #[test]
    fn stop_strings_are_never_streamed() {
        let stops = vec!["</end>".to_string(), "STOP".to_string()];
        let mut f = StopFilter::new(stops);
        assert_eq!(f.push("hello <"), ("hello ".to_string(), false));
        assert_eq!(f.push("/en"), (String::new(), false));
        assert_eq!(f.push("x"), ("</enx".to_string(), false));
        assert_eq!(f.push("ab ST"), ("ab ".to_string(), false));
        assert_eq!(f.push("OP tail"), (String::new(), true));
    }
}
