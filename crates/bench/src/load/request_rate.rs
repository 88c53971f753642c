//! The `--request-rate` value: a finite rate in requests per second, or unlimited.

use std::fmt;
use std::str::FromStr;

/// Requests per second, or `Infinite` to send every request at once.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RequestRate {
    Infinite,
    PerSecond(f64),
}

impl RequestRate {
    /// A finite rate, rejecting values that cannot schedule arrivals.
    pub fn per_second(rate: f64) -> anyhow::Result<Self> {
        if rate.is_finite() && rate > 0.0 {
            Ok(RequestRate::PerSecond(rate))
        } else if rate == f64::INFINITY {
            Ok(RequestRate::Infinite)
        } else {
            anyhow::bail!("request rate must be a positive number or \"inf\", got {rate}")
        }
    }

    /// The value saved in result JSON: vLLM writes `"inf"` for an unlimited rate.
    pub fn to_json(self) -> serde_json::Value {
        match self {
            RequestRate::Infinite => serde_json::Value::from("inf"),
            RequestRate::PerSecond(rate) => serde_json::Value::from(rate),
        }
    }
}

impl FromStr for RequestRate {
    type Err = anyhow::Error;

    fn from_str(text: &str) -> anyhow::Result<Self> {
        let text = text.trim();
        if text.eq_ignore_ascii_case("inf") || text.eq_ignore_ascii_case("infinity") {
            return Ok(RequestRate::Infinite);
        }
        let rate: f64 = text.parse().map_err(|_| {
            anyhow::anyhow!("request rate must be a number or \"inf\", got {text:?}")
        })?;
        RequestRate::per_second(rate)
    }
}

impl fmt::Display for RequestRate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestRate::Infinite => write!(f, "inf"),
            RequestRate::PerSecond(rate) => write!(f, "{rate}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inf_and_numbers_parse() {
        assert_eq!("inf".parse::<RequestRate>().unwrap(), RequestRate::Infinite);
        assert_eq!(
            "2.5".parse::<RequestRate>().unwrap(),
            RequestRate::PerSecond(2.5)
        );
    }

    #[test]
    fn zero_negative_and_text_are_rejected() {
        assert!("0".parse::<RequestRate>().is_err());
        assert!("-1".parse::<RequestRate>().is_err());
        assert!("fast".parse::<RequestRate>().is_err());
    }
}
