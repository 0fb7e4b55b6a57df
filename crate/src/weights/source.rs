//! A byte source is anything we can read ranges from: a file natively, an in-memory buffer, and in
//! the browser a cached/streamed download. Loaders only ever see this trait, so there is one loader
//! for native and web, and nothing needs the whole file in memory.

use crate::error::{Error, Result};

pub trait ByteSource: Send + Sync {
    /// Total length in bytes.
    fn len(&self) -> u64;
    /// Fill `buf` with the bytes at `offset..offset+buf.len()`; a range past the end is an error.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()>;
    /// A human-readable name for error messages (a path or URL).
    fn name(&self) -> String;

    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// An in-memory source (tests, fuzzing, and small headers fetched by the browser).
pub struct MemSource {
    data: Vec<u8>,
    name: String,
}

impl MemSource {
    pub fn new(data: Vec<u8>, name: impl Into<String>) -> Self {
        MemSource { data, name: name.into() }
    }
}

impl ByteSource for MemSource {
    fn len(&self) -> u64 {
        self.data.len() as u64
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let end = offset.checked_add(buf.len() as u64).filter(|&e| e <= self.len()).ok_or_else(|| {
            Error::io(
                self.name.clone(),
                std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "read past end of data"),
            )
        })?;
        buf.copy_from_slice(&self.data[offset as usize..end as usize]);
        Ok(())
    }
    fn name(&self) -> String {
        self.name.clone()
    }
}

/// A file on disk, read with positioned reads (no shared cursor, so it is `Sync`).
#[cfg(not(target_arch = "wasm32"))]
pub struct FileSource {
    file: std::fs::File,
    len: u64,
    path: String,
}

#[cfg(not(target_arch = "wasm32"))]
impl FileSource {
    pub fn open(path: impl AsRef<std::path::Path>) -> Result<Self> {
        let p = path.as_ref();
        let name = p.display().to_string();
        // Before opening: opening a FIFO blocks until something writes to it, and a device
        // reports no length. Weights are read at offsets, so only regular files will do.
        let kind = std::fs::metadata(p).map_err(|e| Error::io(name.clone(), e))?;
        if kind.is_dir() {
            return Err(Error::io(name, std::io::Error::other("is a directory, not a file")));
        }
        if !kind.is_file() {
            return Err(Error::io(name, std::io::Error::other("is not a regular file (a device, FIFO or socket)")));
        }
        let file = std::fs::File::open(p).map_err(|e| Error::io(name.clone(), e))?;
        let meta = file.metadata().map_err(|e| Error::io(name.clone(), e))?;
        Ok(FileSource { file, len: meta.len(), path: name })
    }
}

#[cfg(not(target_arch = "wasm32"))]
impl ByteSource for FileSource {
    fn len(&self) -> u64 {
        self.len
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::FileExt;
            self.file.read_exact_at(buf, offset).map_err(|e| Error::io(self.path.clone(), e))
        }
        #[cfg(windows)]
        {
            use std::os::windows::fs::FileExt;
            let mut done = 0;
            while done < buf.len() {
                let n = self
                    .file
                    .seek_read(&mut buf[done..], offset + done as u64)
                    .map_err(|e| Error::io(self.path.clone(), e))?;
                if n == 0 {
                    return Err(Error::io(
                        self.path.clone(),
                        std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "read past end of file"),
                    ));
                }
                done += n;
            }
            Ok(())
        }
    }
    fn name(&self) -> String {
        self.path.clone()
    }
}

#[cfg(target_arch = "wasm32")]
pub struct FileSource;

/// The asynchronous face of a byte source: what the loader reads through. In the browser a read
/// is a fetch (HTTP range, Cache API, OPFS); natively every `ByteSource` is one, reading at once.
pub trait AsyncSource {
    fn total_len(&self) -> u64;
    fn source_name(&self) -> String;
    fn read<'a>(&'a self, offset: u64, len: usize) -> ReadFuture<'a>;
}

pub type ReadFuture<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Vec<u8>>> + 'a>>;

impl<T: ByteSource + ?Sized> AsyncSource for T {
    fn total_len(&self) -> u64 {
        ByteSource::len(self)
    }
    fn source_name(&self) -> String {
        ByteSource::name(self)
    }
    fn read<'a>(&'a self, offset: u64, len: usize) -> ReadFuture<'a> {
        Box::pin(async move {
            let mut buf = vec![0u8; len];
            self.read_at(offset, &mut buf)?;
            Ok(buf)
        })
    }
}

/// The first bytes of a larger source, for parsing headers without reading the whole file.
/// Reads past the prefix see zeros; callers check that what they parsed ends inside the prefix.
pub struct PrefixSource {
    pub data: Vec<u8>,
    pub total: u64,
    pub name: String,
}

impl ByteSource for PrefixSource {
    fn len(&self) -> u64 {
        self.total
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let end = offset.checked_add(buf.len() as u64).filter(|&e| e <= self.total).ok_or_else(|| {
            Error::io(
                self.name.clone(),
                std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "read past end of data"),
            )
        })?;
        buf.fill(0);
        let have = self.data.len() as u64;
        if offset < have {
            let n = (end.min(have) - offset) as usize;
            buf[..n].copy_from_slice(&self.data[offset as usize..offset as usize + n]);
        }
        Ok(())
    }
    fn name(&self) -> String {
        self.name.clone()
    }
}
