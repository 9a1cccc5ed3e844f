//! Atomic small files under `<data>/meta/`: write to a temporary file, fsync, rename,
//! fsync the directory. A reader sees the old or the new file, never a mix.

use crate::Result;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

pub struct MetaStore {
    dir: PathBuf,
    /// With high availability: every write is also committed to the cluster log
    /// before it returns.
    replica: std::sync::OnceLock<crate::cluster_log::ClusterLog>,
}

impl MetaStore {
    pub fn open(data_dir: &Path) -> Result<Self> {
        let dir = data_dir.join("meta");
        fs::create_dir_all(&dir)?;
        Ok(Self {
            dir,
            replica: Default::default(),
        })
    }

    pub fn read(&self, name: &str) -> Result<Option<Vec<u8>>> {
        match fs::read(self.dir.join(name)) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Commits every later write to `log` too (high availability).
    pub fn replicate(&self, log: crate::cluster_log::ClusterLog) {
        let _ = self.replica.set(log);
    }

    pub fn write(&self, name: &str, bytes: &[u8]) -> Result<()> {
        self.write_local(name, bytes)?;
        if let Some(log) = self.replica.get() {
            let ticket = log.submit(crate::cluster_log::Record::Meta {
                name: name.to_string(),
                bytes: bytes.to_vec(),
            });
            log.wait_blocking(ticket)?;
        }
        Ok(())
    }

    fn write_local(&self, name: &str, bytes: &[u8]) -> Result<()> {
        let tmp = self.dir.join(format!("{name}.tmp"));
        {
            let mut f = fs::File::create(&tmp)?;
            f.write_all(bytes)?;
            f.sync_all()?;
        }
        fs::rename(&tmp, self.dir.join(name))?;
        fs::File::open(&self.dir)?.sync_all()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_then_read() {
        let dir = tempfile::tempdir().unwrap();
        let m = MetaStore::open(dir.path()).unwrap();
        assert!(m.read("catalog.json").unwrap().is_none());
        m.write("catalog.json", b"{}").unwrap();
        m.write("catalog.json", b"{\"a\":1}").unwrap();
        assert_eq!(m.read("catalog.json").unwrap().unwrap(), b"{\"a\":1}");
    }
}
