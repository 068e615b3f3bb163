//! Listen addresses written `"IP:PORT"` or `"off"`.

use std::net::SocketAddr;

use serde::{Deserialize, Deserializer};

/// Parses `"off"` (no listener) or `"IP:PORT"`.
pub fn parse(text: &str) -> Result<Option<SocketAddr>, String> {
    if text.trim().eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    text.trim()
        .parse()
        .map(Some)
        .map_err(|_| format!("`{text}` is not IP:PORT or `off`"))
}

/// `#[serde(deserialize_with = "listen::deserialize")]`.
pub fn deserialize<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<SocketAddr>, D::Error> {
    let text = String::deserialize(deserializer)?;
    parse(&text).map_err(serde::de::Error::custom)
}

/// `#[serde(deserialize_with = "listen::deserialize_required")]`: an `"IP:PORT"` for a
/// listener switched on and off by its own `enabled` field, so `"off"` is refused.
pub fn deserialize_required<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<SocketAddr, D::Error> {
    let text = String::deserialize(deserializer)?;
    text.trim().parse().map_err(|_| {
        serde::de::Error::custom(format!(
            "`{text}` is not IP:PORT (set `enabled = false` to turn the listener off)"
        ))
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn off_and_addresses() {
        assert_eq!(super::parse("off"), Ok(None));
        assert_eq!(super::parse("OFF"), Ok(None));
        assert_eq!(
            super::parse("127.0.0.1:9"),
            Ok(Some("127.0.0.1:9".parse().unwrap()))
        );
        assert!(super::parse("localhost:9").is_err());
    }
}
