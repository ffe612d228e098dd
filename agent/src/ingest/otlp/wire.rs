//! A zero-copy protobuf field walker: reads the fields of one message from a byte slice
//! without allocating, so the span decoder can read the dozen fields it needs and step over
//! the rest (trace and span ids, events, links) untouched.
//!
//! It follows the protobuf wire format: each field is a varint tag (field number << 3 | wire
//! type) and a value that is a varint (type 0), 8 bytes (type 1), a length-prefixed byte
//! string (type 2) or 4 bytes (type 5). Groups (types 3 and 4) were deprecated before proto3
//! and no OTLP message uses them; they are refused. Every length is checked against what is
//! left, so a hostile body can make it fail but never read out of bounds or loop.

/// A malformed protobuf body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The body ends inside a field.
    #[error("truncated protobuf: the body ends inside a field")]
    Truncated,
    /// A varint longer than ten bytes.
    #[error("malformed protobuf: varint longer than 10 bytes")]
    Varint,
    /// Wire type 3, 4, 6 or 7.
    #[error("malformed protobuf: unsupported wire type {0}")]
    WireType(u8),
    /// A field number of 0.
    #[error("malformed protobuf: field number 0")]
    FieldZero,
}

/// One field's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value<'a> {
    /// Wire type 0.
    Varint(u64),
    /// Wire type 1.
    Fixed64(u64),
    /// Wire type 2: bytes, a string or an embedded message.
    Bytes(&'a [u8]),
    /// Wire type 5.
    Fixed32(u32),
}

/// Walks the fields of one message.
#[derive(Debug, Clone)]
pub struct Fields<'a> {
    buf: &'a [u8],
}

impl<'a> Fields<'a> {
    /// The fields of the message encoded in `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Fields { buf }
    }

    fn varint(&mut self) -> Result<u64, WireError> {
        let mut v = 0u64;
        for i in 0..10 {
            let Some((&b, rest)) = self.buf.split_first() else {
                return Err(WireError::Truncated);
            };
            self.buf = rest;
            v |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(WireError::Varint)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if n > self.buf.len() {
            return Err(WireError::Truncated);
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    /// The next field number and value, or `None` at the end of the message.
    #[allow(clippy::should_implement_trait)] // fallible: an Iterator of Results reads worse
    pub fn next(&mut self) -> Result<Option<(u32, Value<'a>)>, WireError> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        let tag = self.varint()?;
        let field = (tag >> 3) as u32;
        if field == 0 {
            return Err(WireError::FieldZero);
        }
        let value = match (tag & 7) as u8 {
            0 => Value::Varint(self.varint()?),
            1 => Value::Fixed64(u64::from_le_bytes(
                self.take(8)?.try_into().expect("8 bytes"),
            )),
            2 => {
                let len = usize::try_from(self.varint()?).map_err(|_| WireError::Truncated)?;
                Value::Bytes(self.take(len)?)
            }
            5 => Value::Fixed32(u32::from_le_bytes(
                self.take(4)?.try_into().expect("4 bytes"),
            )),
            t => return Err(WireError::WireType(t)),
        };
        Ok(Some((field, value)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_each_wire_type_and_refuses_what_is_cut_short() {
        // field 1 varint 300, field 2 fixed64 7, field 3 bytes "hi", field 4 fixed32 9
        let mut buf = vec![0x08, 0xac, 0x02, 0x11];
        buf.extend_from_slice(&7u64.to_le_bytes());
        buf.extend_from_slice(&[0x1a, 2, b'h', b'i', 0x25]);
        buf.extend_from_slice(&9u32.to_le_bytes());
        let mut f = Fields::new(&buf);
        assert_eq!(f.next(), Ok(Some((1, Value::Varint(300)))));
        assert_eq!(f.next(), Ok(Some((2, Value::Fixed64(7)))));
        assert_eq!(f.next(), Ok(Some((3, Value::Bytes(b"hi")))));
        assert_eq!(f.next(), Ok(Some((4, Value::Fixed32(9)))));
        assert_eq!(f.next(), Ok(None));
        for cut in 1..buf.len() {
            let mut f = Fields::new(&buf[..cut]);
            let mut result = Ok(None);
            for _ in 0..5 {
                result = f.next();
                if !matches!(result, Ok(Some(_))) {
                    break;
                }
            }
            assert!(
                result.is_err() || cut == 3 || cut == 12 || cut == 16,
                "cut {cut}: {result:?}"
            );
        }
        assert_eq!(Fields::new(&[0x0b]).next(), Err(WireError::WireType(3)));
        assert_eq!(Fields::new(&[0x00]).next(), Err(WireError::FieldZero));
        assert_eq!(
            Fields::new(&[0x0a, 0xff, 0xff, 0xff, 0x0f]).next(),
            Err(WireError::Truncated)
        );
        assert_eq!(
            Fields::new(&[0x08; 12]).next().ok(),
            Some(Some((1, Value::Varint(8))))
        );
        assert_eq!(
            Fields::new(&[
                0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01
            ])
            .next(),
            Err(WireError::Varint)
        );
    }
}
