//! Byte sizes on command lines: `65536`, `512M` (K, M, G: powers of 1024), `1.5GiB`,
//! `500MB` (KB, MB, GB: powers of 1000).

pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().map_err(|_| {
        format!("{s:?} is not a size (bytes, or a number and K, M, G, KiB, MiB, GiB, KB, MB or GB)")
    })?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        other => return Err(format!("unknown size unit {other:?} in {s:?}")),
    };
    let bytes = n * mult as f64;
    if !(bytes >= 1.0 && bytes.is_finite() && bytes <= u64::MAX as f64) {
        return Err(format!("{s:?} is not a positive size"));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::parse_bytes;

    #[test]
    fn sizes_with_and_without_units() {
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(parse_bytes("512M"), Ok(512 << 20));
        assert_eq!(parse_bytes("1.5G"), Ok(3 << 29));
        assert_eq!(parse_bytes("1.5GiB"), Ok(1_610_612_736));
        assert_eq!(parse_bytes("300 MiB"), Ok(300 << 20));
        assert_eq!(parse_bytes("50MB"), Ok(50_000_000));
        assert!(parse_bytes("12X").is_err());
        assert!(parse_bytes("12 parsecs").is_err());
        assert!(parse_bytes("-1").is_err());
        assert!(parse_bytes("").is_err());
        assert!(parse_bytes("MB").is_err());
        assert!(parse_bytes("0").is_err());
    }
}
