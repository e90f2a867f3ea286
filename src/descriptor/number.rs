//! Numbers in descriptors: JSON numbers, or strings in decimal, `0x` hex, with an optional
//! leading minus. Negative values are kept as their 64-bit two's complement.

use serde_json::Value;

/// A parsed number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Number {
    /// The value; negative numbers as 64-bit two's complement.
    pub value: u64,
    /// True when written with a minus sign.
    pub negative: bool,
}

/// Parses a JSON number or numeric string; `None` when it is neither.
pub fn parse_number(v: &Value) -> Option<Number> {
    match v {
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                Some(Number {
                    value: u,
                    negative: false,
                })
            } else {
                n.as_i64().map(|i| Number {
                    value: i as u64,
                    negative: i < 0,
                })
            }
        }
        Value::String(s) => parse_number_text(s),
        _ => None,
    }
}

/// Parses `123`, `-123`, `0x7b`, `-0x7b` (hex digits in either case).
pub fn parse_number_text(s: &str) -> Option<Number> {
    let (negative, digits) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    let magnitude = if let Some(hex) = digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        if hex.is_empty() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        u64::from_str_radix(hex, 16).ok()?
    } else {
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        digits.parse::<u64>().ok()?
    };
    if negative {
        // The most negative i64 is the largest magnitude allowed.
        if magnitude > 1u64 << 63 {
            return None;
        }
        Some(Number {
            value: magnitude.wrapping_neg(),
            negative: magnitude != 0,
        })
    } else {
        Some(Number {
            value: magnitude,
            negative: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms() {
        assert_eq!(parse_number_text("42").map(|n| n.value), Some(42));
        assert_eq!(parse_number_text("0x2A").map(|n| n.value), Some(42));
        assert_eq!(
            parse_number_text("-0x10").map(|n| n.value as i64),
            Some(-16)
        );
        assert_eq!(parse_number_text("-16").map(|n| n.negative), Some(true));
        assert_eq!(
            parse_number_text("0xffffffffffffffff").map(|n| n.value),
            Some(u64::MAX)
        );
        assert_eq!(
            parse_number_text("-0x8000000000000000").map(|n| n.value as i64),
            Some(i64::MIN)
        );
        for bad in [
            "",
            "-",
            "0x",
            "x64",
            "1.5",
            "0x1g",
            "18446744073709551616",
            "-0x8000000000000001",
            " 1",
        ] {
            assert_eq!(parse_number_text(bad), None, "{bad:?}");
        }
    }
}
