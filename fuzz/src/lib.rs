//! Helpers shared by the fuzz targets: turning fuzzer bytes into choices.

/// Reads choices off the front of the fuzzer's input; past the end every
/// read yields zero, so any input is usable.
pub struct Input<'a> {
    bytes: &'a [u8],
}

impl<'a> Input<'a> {
    /// Wraps the fuzzer's bytes.
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { bytes }
    }

    /// One byte (0 at the end).
    pub fn byte(&mut self) -> u8 {
        match self.bytes.split_first() {
            Some((b, rest)) => {
                self.bytes = rest;
                *b
            }
            None => 0,
        }
    }

    /// A number in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        let v = u16::from_le_bytes([self.byte(), self.byte()]) as usize;
        v % n.max(1)
    }

    /// The next `n` bytes (fewer at the end).
    pub fn take(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.bytes.split_at(n.min(self.bytes.len()));
        self.bytes = rest;
        head
    }

    /// Bytes up to the next `sep` (consumed) or the end.
    pub fn field(&mut self, sep: u8) -> &'a [u8] {
        match self.bytes.iter().position(|b| *b == sep) {
            Some(i) => {
                let head = &self.bytes[..i];
                self.bytes = &self.bytes[i + 1..];
                head
            }
            None => self.rest(),
        }
    }

    /// A `field` as lossy UTF-8.
    pub fn text(&mut self, sep: u8) -> String {
        String::from_utf8_lossy(self.field(sep)).into_owned()
    }

    /// Everything left.
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.bytes)
    }

    /// Whether nothing is left.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

/// Splits `body` into pieces whose lengths come from `sizes` (0 = an empty
/// piece), the remainder as the last piece.
pub fn chunks<'a>(body: &'a [u8], sizes: &[u8]) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    let mut rest = body;
    for s in sizes {
        let (head, tail) = rest.split_at((*s as usize).min(rest.len()));
        out.push(head);
        rest = tail;
    }
    out.push(rest);
    out
}

/// A scratch directory for this process: `$WHARF_FUZZ_SCRATCH` (which
/// `cargo xtask fuzz` creates and removes), else a new directory in
/// /dev/shm (in memory: the store syncs files) or the temp dir, left behind.
pub fn scratch_dir() -> &'static std::path::PathBuf {
    static DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let base = match std::env::var_os("WHARF_FUZZ_SCRATCH") {
            Some(d) => std::path::PathBuf::from(d),
            None if std::path::Path::new("/dev/shm").is_dir() => "/dev/shm".into(),
            None => std::env::temp_dir(),
        };
        let _ = std::fs::create_dir_all(&base);
        let d = tempfile::Builder::new().prefix("wharf-fuzz-").tempdir_in(&base).map(|d| d.keep());
        d.unwrap_or_else(|e| panic!("cannot create a scratch directory in {}: {e}", base.display()))
    })
}
