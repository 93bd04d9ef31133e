//! Output capture: the combined stdout+stderr of a process, kept as a head
//! and a tail in memory, with the full stream spilled to a file once it
//! outgrows them (or from the start, for background jobs).

use std::collections::VecDeque;
use std::fs::File;
use std::io::Write;
use std::path::PathBuf;

/// Bytes kept from the start of the output.
pub const HEAD: usize = 16 << 10;
/// Bytes kept from the end of the output.
pub const TAIL: usize = 16 << 10;
/// Most bytes written to one spill file; past it the spill file is
/// truncated (the byte count still counts everything).
pub const SPILL_CAP: u64 = 1 << 30;

/// Head, tail and spill file of one process's output.
pub struct Capture {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: u64,
    spill_path: PathBuf,
    spill: Option<File>,
    spilled: u64,
    spill_error: Option<String>,
}

impl Capture {
    /// A capture that spills to `spill_path` once the output exceeds
    /// [`HEAD`] + [`TAIL`] bytes, or right away when `always_spill`.
    pub fn new(spill_path: PathBuf, always_spill: bool) -> Self {
        let mut c = Self {
            head: Vec::new(),
            tail: VecDeque::new(),
            total: 0,
            spill_path,
            spill: None,
            spilled: 0,
            spill_error: None,
        };
        if always_spill {
            c.open_spill();
        }
        c
    }

    fn open_spill(&mut self) {
        if self.spill.is_some() || self.spill_error.is_some() {
            return;
        }
        let res = (|| {
            if let Some(dir) = self.spill_path.parent() {
                create_private_dir_all(dir)?;
            }
            let mut opts = std::fs::OpenOptions::new();
            opts.write(true).create(true).truncate(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
            opts.open(&self.spill_path)
        })();
        match res {
            Ok(f) => self.spill = Some(f),
            Err(e) => self.spill_error = Some(format!("cannot write {}: {e}", self.spill_path.display())),
        }
        // Everything so far is in head + tail (nothing was dropped yet).
        let (a, b) = self.tail.as_slices();
        let prefix = [self.head.clone(), a.to_vec(), b.to_vec()].concat();
        self.write_spill(&prefix);
    }

    fn write_spill(&mut self, data: &[u8]) {
        let Some(f) = self.spill.as_mut() else { return };
        let room = SPILL_CAP.saturating_sub(self.spilled);
        let n = (data.len() as u64).min(room) as usize;
        if n == 0 {
            return;
        }
        if let Err(e) = f.write_all(&data[..n]) {
            self.spill_error = Some(format!("writing {} failed: {e}", self.spill_path.display()));
            self.spill = None;
            return;
        }
        self.spilled += n as u64;
    }

    /// Adds a chunk of output.
    pub fn push(&mut self, mut data: &[u8]) {
        if self.spill.is_none() && self.total + data.len() as u64 > (HEAD + TAIL) as u64 {
            self.open_spill();
        }
        self.write_spill(data);
        self.total += data.len() as u64;
        if self.head.len() < HEAD {
            let n = (HEAD - self.head.len()).min(data.len());
            self.head.extend_from_slice(&data[..n]);
            data = &data[n..];
        }
        if data.len() >= TAIL {
            self.tail.clear();
            self.tail.extend(&data[data.len() - TAIL..]);
        } else {
            let over = (self.tail.len() + data.len()).saturating_sub(TAIL);
            self.tail.drain(..over);
            self.tail.extend(data);
        }
    }

    /// Flushes the spill file.
    pub fn flush(&mut self) {
        if let Some(f) = self.spill.as_mut() {
            let _ = f.flush();
        }
    }

    /// Total bytes produced.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Where the full output is, when it was spilled.
    pub fn spill_path(&self) -> Option<String> {
        (self.spill.is_some() || self.spilled > 0).then(|| self.spill_path.display().to_string())
    }

    /// The capped text: everything when it fits, else head, a marker naming
    /// the omitted byte count and the spill file, and tail.
    pub fn text(&self) -> String {
        let (a, b) = self.tail.as_slices();
        let kept = (self.head.len() + self.tail.len()) as u64;
        if kept >= self.total {
            return String::from_utf8_lossy(&[&self.head[..], a, b].concat()).into_owned();
        }
        let omitted = self.total - kept;
        let where_ = match (&self.spill_error, self.spill_path()) {
            (Some(e), _) => format!("the full output could not be saved: {e}"),
            (None, Some(p)) if self.spilled < self.total => {
                format!("the first {} bytes of the output are in {p}", self.spilled)
            }
            (None, Some(p)) => format!("full output in {p}"),
            (None, None) => "the full output was not saved".to_string(),
        };
        format!(
            "{}\n\n[… {omitted} bytes omitted; {where_} …]\n\n{}",
            String::from_utf8_lossy(&self.head),
            String::from_utf8_lossy(&[a, b].concat())
        )
    }
}

/// `mkdir -p` with mode 0700 for the directories it creates.
pub fn create_private_dir_all(dir: &std::path::Path) -> std::io::Result<()> {
    let mut b = std::fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
    b.create(dir)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn small_output_is_kept_whole_and_not_spilled() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = Capture::new(dir.path().join("s/out.log"), false);
        c.push(b"hello ");
        c.push(b"world");
        assert_eq!(c.text(), "hello world");
        assert_eq!(c.total(), 11);
        assert!(c.spill_path().is_none());
        assert!(!dir.path().join("s").exists());
    }

    #[test]
    fn large_output_keeps_head_and_tail_and_spills_everything() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.log");
        let mut c = Capture::new(path.clone(), false);
        let mut all = Vec::new();
        for i in 0..5000u32 {
            let line = format!("line {i}\n");
            all.extend_from_slice(line.as_bytes());
            c.push(line.as_bytes());
        }
        c.flush();
        let text = c.text();
        assert!(text.starts_with("line 0\nline 1\n"));
        assert!(text.ends_with("line 4999\n"));
        assert!(text.contains("bytes omitted; full output in"), "{}", &text[HEAD - 20..HEAD + 200]);
        assert!(text.len() < HEAD + TAIL + 500);
        assert_eq!(c.total(), all.len() as u64);
        assert_eq!(std::fs::read(&path).unwrap(), all);
        assert_eq!(c.spill_path(), Some(path.display().to_string()));
    }

    #[test]
    fn one_huge_chunk() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.log");
        let mut c = Capture::new(path.clone(), true);
        let data: Vec<u8> = (0..200_000u32).map(|i| b'a' + (i % 26) as u8).collect();
        c.push(&data);
        c.flush();
        assert_eq!(std::fs::read(&path).unwrap(), data);
        let text = c.text();
        assert!(text.ends_with(std::str::from_utf8(&data[data.len() - TAIL..]).unwrap()));
    }
}
