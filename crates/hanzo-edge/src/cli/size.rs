//! Byte sizes on the command line: `500000000`, `500MB`, `1.5GiB`.

pub fn parse(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().map_err(|_| {
        format!("{s:?} is not a size (bytes, or a number with KB/MB/GB/KiB/MiB/GiB)")
    })?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" | "k" => 1000,
        "mb" | "m" => 1_000_000,
        "gb" | "g" => 1_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        other => return Err(format!("unknown size unit {other:?} in {s:?}")),
    };
    let bytes = n * mult as f64;
    if !bytes.is_finite() || bytes < 1.0 || bytes > u64::MAX as f64 {
        return Err(format!("{s:?} is not a usable size"));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn sizes_with_and_without_units() {
        assert_eq!(parse("123").unwrap(), 123);
        assert_eq!(parse("50MB").unwrap(), 50_000_000);
        assert_eq!(parse("1.5GiB").unwrap(), 1_610_612_736);
        assert_eq!(parse("300 MiB").unwrap(), 300 << 20);
        assert!(parse("12 parsecs").is_err());
        assert!(parse("MB").is_err());
        assert!(parse("0").is_err());
    }
}
