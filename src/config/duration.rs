//! Durations written as text in the config file: `5s`, `250ms`, `2m`, `1h 30m`.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serializer};

/// Parses a duration like `5s`, `250ms`, `2m`.
pub fn parse(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim())
        .map_err(|e| format!("{e} (write durations like 5s, 250ms, 2m)"))
}

/// Renders a duration the way the config file writes it.
pub fn render(duration: Duration) -> String {
    humantime::format_duration(duration).to_string()
}

/// `#[serde(with = "duration")]` helper: deserialize.
pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(deserializer)?;
    parse(&text).map_err(serde::de::Error::custom)
}

/// `#[serde(with = "duration")]` helper: serialize.
pub fn serialize<S: Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&render(*duration))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_documented_forms() {
        assert_eq!(parse("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse(" 1h 30m "), Ok(Duration::from_secs(5400)));
        assert!(parse("5").is_err());
        assert!(parse("soon").is_err());
        assert_eq!(
            parse(&render(Duration::from_millis(1500))),
            Ok(Duration::from_millis(1500))
        );
    }
}
