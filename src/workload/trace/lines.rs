//! Line-bounded reading shared by the readers.
//!
//! Readers stream: they hold one line (JSON lines) or one record plus the CSV parser's
//! read-ahead (CSV), never the file. What could still grow without end is a single line, so
//! every line is capped at [`MAX_LINE_BYTES`]: `pdsim trace stats /dev/zero` stops after
//! 1 MiB with [`TraceError::LineTooLong`](super::TraceError::LineTooLong) instead of
//! reading until memory runs out.

use std::io::{self, BufRead, Read};

/// The longest line a trace may hold, in bytes (terminator excluded): 1 MiB. The longest
/// line of the shared traces is a Mooncake row of ~2 KiB (a 128k-token prompt has 250
/// `hash_ids`), so this is far from any real row.
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// What [`read_line_bounded`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum LineRead {
    /// End of input, nothing read.
    Eof,
    /// A line ended by `\n` (the `\n` is consumed, not stored).
    Terminated,
    /// The last line, without a `\n`.
    Unterminated,
    /// The line exceeds [`MAX_LINE_BYTES`]; `buf` holds its first bytes.
    TooLong,
}

/// Read the next `\n`-terminated line into `buf` (cleared first, `\n` not stored), stopping
/// as soon as it would exceed [`MAX_LINE_BYTES`].
pub(super) fn read_line_bounded<R: BufRead + ?Sized>(
    reader: &mut R,
    buf: &mut Vec<u8>,
) -> io::Result<LineRead> {
    buf.clear();
    loop {
        let avail = match reader.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if avail.is_empty() {
            return Ok(if buf.is_empty() {
                LineRead::Eof
            } else {
                LineRead::Unterminated
            });
        }
        let newline = avail.iter().position(|&b| b == b'\n');
        let take = newline.unwrap_or(avail.len());
        if buf.len() + take > MAX_LINE_BYTES {
            return Ok(LineRead::TooLong);
        }
        buf.extend_from_slice(&avail[..take]);
        reader.consume(take + usize::from(newline.is_some()));
        if newline.is_some() {
            return Ok(LineRead::Terminated);
        }
    }
}

/// The payload of the `io::Error` that [`CountingReader`] returns for an over-long line,
/// recovered by the CSV reader from the `csv::Error` that wraps it.
#[derive(Debug)]
pub(super) struct LineTooLong {
    /// 1-based line on which the over-long line starts.
    pub line: u64,
}

impl std::fmt::Display for LineTooLong {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "line {} is longer than {MAX_LINE_BYTES} bytes",
            self.line
        )
    }
}

impl std::error::Error for LineTooLong {}

/// The byte source of the CSV parser. It passes bytes through unchanged, caps the line
/// length, and keeps a window of the bytes read so far from absolute offset `base` on: the
/// csv crate does not report reliable line numbers (see `CsvFile::record_line`), so the CSV
/// reader counts lines in this window itself and trims it as it goes.
pub(super) struct CountingReader<R> {
    inner: R,
    /// Bytes from absolute offset `base` to everything read so far.
    pub window: Vec<u8>,
    /// Absolute offset (bytes from the start of the input) of `window[0]`.
    pub base: u64,
    /// Line-length guard: the current line's 1-based number and length so far, in bytes.
    line: u64,
    line_len: usize,
    /// The previous byte was `\r`, so a `\n` now ends no new line (CRLF).
    after_cr: bool,
}

impl<R> CountingReader<R> {
    pub(super) fn new(inner: R) -> Self {
        CountingReader {
            inner,
            window: Vec::new(),
            base: 0,
            line: 1,
            line_len: 0,
            after_cr: false,
        }
    }

    /// Drop the window's bytes before absolute offset `keep_from`. Only done once the dead
    /// prefix is large, so the memmove is amortised over many records.
    pub(super) fn trim(&mut self, keep_from: u64) {
        let dead = usize::try_from(keep_from.saturating_sub(self.base))
            .unwrap_or(usize::MAX)
            .min(self.window.len());
        if dead >= 64 * 1024 && dead * 2 >= self.window.len() {
            self.window.drain(..dead);
            self.base += dead as u64;
        }
    }
}

impl<R: Read> Read for CountingReader<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(out)?;
        // Line ends as the CSV reader counts them: `\n`, `\r\n`, or a lone `\r`.
        for &b in &out[..n] {
            match b {
                b'\r' => {
                    self.line += 1;
                    self.line_len = 0;
                    self.after_cr = true;
                }
                b'\n' => {
                    if !self.after_cr {
                        self.line += 1;
                    }
                    self.line_len = 0;
                    self.after_cr = false;
                }
                _ => {
                    self.line_len += 1;
                    self.after_cr = false;
                    if self.line_len > MAX_LINE_BYTES {
                        return Err(io::Error::other(LineTooLong { line: self.line }));
                    }
                }
            }
        }
        self.window.extend_from_slice(&out[..n]);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_lines_stop_at_the_cap() {
        let mut buf = Vec::new();
        let mut r = &b"ab\ncd"[..];
        assert_eq!(
            read_line_bounded(&mut r, &mut buf).unwrap(),
            LineRead::Terminated
        );
        assert_eq!(buf, b"ab");
        assert_eq!(
            read_line_bounded(&mut r, &mut buf).unwrap(),
            LineRead::Unterminated
        );
        assert_eq!(buf, b"cd");
        assert_eq!(read_line_bounded(&mut r, &mut buf).unwrap(), LineRead::Eof);

        let exact = vec![b'x'; MAX_LINE_BYTES];
        let mut r = io::BufReader::new(&exact[..]);
        assert_eq!(
            read_line_bounded(&mut r, &mut buf).unwrap(),
            LineRead::Unterminated
        );
        let mut r = io::BufReader::new(io::repeat(0));
        assert_eq!(
            read_line_bounded(&mut r, &mut buf).unwrap(),
            LineRead::TooLong
        );
        assert!(buf.len() <= MAX_LINE_BYTES);
    }

    #[test]
    fn counting_reader_names_the_long_line() {
        let mut data = b"a\r\nb\rc\n".to_vec();
        data.extend(std::iter::repeat_n(b'z', MAX_LINE_BYTES + 1));
        let mut r = CountingReader::new(&data[..]);
        let err = io::copy(&mut r, &mut io::sink()).unwrap_err();
        let long = err.get_ref().unwrap().downcast_ref::<LineTooLong>();
        assert_eq!(long.unwrap().line, 4);
    }
}
