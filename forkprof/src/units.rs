//! Numbers for people: pure formatting helpers shared by the model's findings and the outputs.

/// A duration in nanoseconds for people: "812 ns", "41.2 µs", "25.1 ms", "1.20 s".
pub fn duration(ns: u64) -> String {
    let ns_f = ns as f64;
    if ns < 1_000 {
        format!("{ns} ns")
    } else if ns < 1_000_000 {
        format!("{:.1} µs", ns_f / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.1} ms", ns_f / 1e6)
    } else {
        format!("{:.2} s", ns_f / 1e9)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn durations() {
        assert_eq!(super::duration(812), "812 ns");
        assert_eq!(super::duration(41_234), "41.2 µs");
        assert_eq!(super::duration(25_100_000), "25.1 ms");
        assert_eq!(super::duration(1_200_000_000), "1.20 s");
    }
}
