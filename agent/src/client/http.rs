//! A minimal HTTP/1.1 client over a blocking `TcpStream`: enough for `skewwatch bench` to POST
//! NDJSON batches on a keep-alive connection and to GET `/metrics`, and for the end-to-end tests
//! to talk to a real agent, without an async runtime.
//!
//! It reads `Content-Length` and `chunked` bodies and nothing fancier; it is a client for a
//! server we know, not a general one.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Longest response head or chunk-size line read.
const MAX_LINE: usize = 8 * 1024;
/// Largest response body read (a `/metrics` page of many shards fits easily).
const MAX_BODY: usize = 256 * 1024 * 1024;

/// One response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Header fields in order, names lowercased.
    pub headers: Vec<(String, String)>,
    /// The body, de-chunked.
    pub body: Vec<u8>,
    /// True when the server asked to close the connection.
    pub close: bool,
}

/// A keep-alive connection to one server.
#[derive(Debug)]
pub struct Connection {
    addr: SocketAddr,
    reader: BufReader<TcpStream>,
    head: Vec<u8>,
}

impl Connection {
    /// Connects with `TCP_NODELAY` (a request goes out as soon as it is written).
    pub fn connect(addr: SocketAddr, timeout: Duration) -> io::Result<Connection> {
        let stream = TcpStream::connect_timeout(&addr, timeout)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        Ok(Connection {
            addr,
            reader: BufReader::with_capacity(64 * 1024, stream),
            head: Vec::with_capacity(512),
        })
    }

    /// Sends one request and reads its response. `extra_headers` are complete header lines
    /// without the line end.
    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        extra_headers: &[&str],
        body: &[u8],
    ) -> io::Result<Response> {
        self.head.clear();
        write!(
            self.head,
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\n",
            self.addr,
            body.len()
        )?;
        for h in extra_headers {
            self.head.extend_from_slice(h.as_bytes());
            self.head.extend_from_slice(b"\r\n");
        }
        self.head.extend_from_slice(b"\r\n");
        let stream = self.reader.get_mut();
        // Head and body in one system call where the kernel allows it.
        let mut parts = [io::IoSlice::new(&self.head), io::IoSlice::new(body)];
        write_all_vectored(stream, &mut parts)?;
        read_response(&mut self.reader)
    }
}

/// `Write::write_all_vectored` is unstable; this is the same loop.
fn write_all_vectored(w: &mut impl Write, mut bufs: &mut [io::IoSlice<'_>]) -> io::Result<()> {
    io::IoSlice::advance_slices(&mut bufs, 0);
    while !bufs.is_empty() {
        match w.write_vectored(bufs) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => io::IoSlice::advance_slices(&mut bufs, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

fn read_line(r: &mut impl BufRead, line: &mut Vec<u8>) -> io::Result<()> {
    line.clear();
    let n = r.take(MAX_LINE as u64).read_until(b'\n', line)?;
    if n == 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    while matches!(line.last(), Some(b'\n' | b'\r')) {
        line.pop();
    }
    Ok(())
}

/// Reads a status line, headers and body.
fn read_response(r: &mut impl BufRead) -> io::Result<Response> {
    let mut line = Vec::with_capacity(128);
    read_line(r, &mut line)?;
    let status = line
        .split(|&b| b == b' ')
        .nth(1)
        .and_then(|s| std::str::from_utf8(s).ok())
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| invalid("bad HTTP status line"))?;
    let mut length = None;
    let mut chunked = false;
    let mut close = false;
    let mut headers = Vec::new();
    loop {
        read_line(r, &mut line)?;
        if line.is_empty() {
            break;
        }
        let text = String::from_utf8_lossy(&line);
        let Some((name, value)) = text.split_once(':') else {
            continue;
        };
        let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
        let lower = value.to_ascii_lowercase();
        match name.as_str() {
            "content-length" => {
                length = Some(value.parse().map_err(|_| invalid("bad Content-Length"))?);
            }
            "transfer-encoding" => chunked = lower.contains("chunked"),
            "connection" => close = lower.contains("close"),
            _ => {}
        }
        headers.push((name, value.to_owned()));
    }
    let body = if chunked {
        read_chunked(r, &mut line)?
    } else {
        match length {
            Some(n) if n > MAX_BODY => return Err(invalid("response body too large")),
            Some(n) => {
                let mut body = vec![0; n];
                r.read_exact(&mut body)?;
                body
            }
            None => {
                // No length: the body runs to the end of the connection.
                close = true;
                let mut body = Vec::new();
                r.take(MAX_BODY as u64).read_to_end(&mut body)?;
                body
            }
        }
    };
    Ok(Response {
        status,
        headers,
        body,
        close,
    })
}

fn read_chunked(r: &mut impl BufRead, line: &mut Vec<u8>) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        read_line(r, line)?;
        let size = std::str::from_utf8(line)
            .ok()
            .and_then(|s| usize::from_str_radix(s.split(';').next()?.trim(), 16).ok())
            .ok_or_else(|| invalid("bad chunk size"))?;
        if size == 0 {
            // Trailers, then the empty line.
            loop {
                read_line(r, line)?;
                if line.is_empty() {
                    return Ok(body);
                }
            }
        }
        if body.len() + size > MAX_BODY {
            return Err(invalid("response body too large"));
        }
        let start = body.len();
        body.resize(start + size, 0);
        r.read_exact(&mut body[start..])?;
        read_line(r, line)?;
    }
}

impl Response {
    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as text (lossy).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// `GET path` on a fresh connection.
pub fn get(addr: SocketAddr, path: &str, timeout: Duration) -> io::Result<Response> {
    Connection::connect(addr, timeout)?.request("GET", path, &["Connection: close"], b"")
}

/// One request on a fresh connection that closes after it. `headers` are name/value pairs.
/// A server may answer and close before it reads a large body (413, 401), so a body that
/// cannot be written in full still leaves the answer to read.
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    timeout: Duration,
) -> io::Result<Response> {
    let mut c = Connection::connect(addr, timeout)?;
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let stream = c.reader.get_mut();
    stream.write_all(head.as_bytes())?;
    let _ = stream.write_all(body);
    read_response(&mut c.reader)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_length_and_chunked_bodies() {
        let raw = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello";
        let r = read_response(&mut &raw[..]).unwrap();
        assert_eq!(
            (r.status, r.body.as_slice(), r.close),
            (200, &b"hello"[..], false)
        );
        let raw = b"HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\n\
            Connection: close\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n";
        let r = read_response(&mut &raw[..]).unwrap();
        assert_eq!(
            (r.status, r.body.as_slice(), r.close),
            (503, &b"abcde"[..], true)
        );
    }

    #[test]
    fn a_truncated_response_is_an_error() {
        let raw = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello";
        assert!(read_response(&mut &raw[..]).is_err());
        assert!(read_response(&mut &b""[..]).is_err());
    }
}
