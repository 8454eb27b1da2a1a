//! Splits the port's byte stream into request lines.
//!
//! Bounded: a line longer than the limit is reported once and its bytes are
//! dropped up to the next newline, so a peer cannot make the agent buffer
//! without end. End of file (the outer side of a virtio-serial port is not
//! connected) drops any partial line, so a client that vanished mid-request
//! does not corrupt the next client's first request.

use std::io::{self, Read};

/// What [`LineReader::next_event`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Event {
    /// A complete line, without its newline.
    Line(Vec<u8>),
    /// A line exceeded the limit; it is being discarded.
    TooLong,
    /// `read` returned 0.
    Eof,
}

/// Newline splitter with a line-length limit.
#[derive(Debug)]
pub struct LineReader<R> {
    inner: R,
    buf: Vec<u8>,
    /// Bytes of `buf` already known to hold no newline.
    scanned: usize,
    /// Dropping the rest of an over-long line.
    discarding: bool,
    max: usize,
    chunk: Box<[u8]>,
}

impl<R: Read> LineReader<R> {
    /// Reads from `inner`, rejecting lines longer than `max` bytes.
    pub fn new(inner: R, max: usize) -> Self {
        LineReader {
            inner,
            buf: Vec::new(),
            scanned: 0,
            discarding: false,
            max,
            chunk: vec![0; 64 * 1024].into_boxed_slice(),
        }
    }

    /// Returns the next line, over-long line or end of file. I/O errors other
    /// than `Interrupted` are returned; the reader stays usable after them.
    pub fn next_event(&mut self) -> io::Result<Event> {
        loop {
            if let Some(off) = self.buf[self.scanned..].iter().position(|&b| b == b'\n') {
                let end = self.scanned + off;
                let mut line: Vec<u8> = self.buf.drain(..=end).collect();
                line.pop();
                self.scanned = 0;
                if std::mem::take(&mut self.discarding) {
                    continue;
                }
                if line.len() > self.max {
                    return Ok(Event::TooLong);
                }
                return Ok(Event::Line(line));
            }
            if self.discarding {
                self.buf.clear();
            } else if self.buf.len() > self.max {
                self.buf.clear();
                self.discarding = true;
                self.scanned = 0;
                return Ok(Event::TooLong);
            }
            self.scanned = self.buf.len();
            let n = match self.inner.read(&mut self.chunk) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if n == 0 {
                self.buf.clear();
                self.scanned = 0;
                self.discarding = false;
                return Ok(Event::Eof);
            }
            self.buf.extend_from_slice(&self.chunk[..n]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    /// Returns scripted chunks; `None` is a read of 0 (EOF), then continues.
    struct Script(VecDeque<Option<Vec<u8>>>);

    impl Read for Script {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            match self.0.pop_front() {
                Some(Some(mut chunk)) => {
                    let n = chunk.len().min(out.len());
                    out[..n].copy_from_slice(&chunk[..n]);
                    if n < chunk.len() {
                        self.0.push_front(Some(chunk.split_off(n)));
                    }
                    Ok(n)
                }
                Some(None) => Ok(0),
                None => Err(io::Error::new(io::ErrorKind::BrokenPipe, "script done")),
            }
        }
    }

    fn events(max: usize, chunks: &[Option<&[u8]>]) -> Vec<Event> {
        let script = chunks.iter().map(|c| c.map(<[u8]>::to_vec)).collect();
        let mut r = LineReader::new(Script(script), max);
        let mut out = Vec::new();
        while let Ok(ev) = r.next_event() {
            out.push(ev);
        }
        out
    }

    fn line(s: &str) -> Event {
        Event::Line(s.as_bytes().to_vec())
    }

    #[test]
    fn splits_and_joins_chunks() {
        assert_eq!(
            events(100, &[Some(b"a\nbb\nc"), Some(b"c"), Some(b"c\n\n")]),
            [line("a"), line("bb"), line("ccc"), line("")]
        );
    }

    #[test]
    fn eof_drops_partial_line_and_reading_continues() {
        assert_eq!(
            events(100, &[Some(b"{\"id\":1,"), None, None, Some(b"x\n")]),
            [Event::Eof, Event::Eof, line("x")]
        );
    }

    #[test]
    fn long_lines_are_rejected_once_and_skipped() {
        let long = vec![b'a'; 250];
        assert_eq!(
            events(
                100,
                &[
                    Some(&long),
                    Some(&long),
                    Some(b"aaa\nok\n"),
                    Some(&long[..101]),
                    Some(b"\n")
                ]
            ),
            [Event::TooLong, line("ok"), Event::TooLong]
        );
        // Exactly at the limit is fine; one more in the same chunk is not.
        let mut at = vec![b'b'; 100];
        at.push(b'\n');
        at.extend_from_slice(&[b'c'; 101]);
        at.push(b'\n');
        let ev = events(100, &[Some(&at)]);
        assert_eq!(ev, [Event::Line(vec![b'b'; 100]), Event::TooLong]);
    }

    #[test]
    fn eof_ends_discarding() {
        let long = vec![b'a'; 150];
        assert_eq!(
            events(100, &[Some(&long), None, Some(b"y\n")]),
            [Event::TooLong, Event::Eof, line("y")]
        );
    }
}
