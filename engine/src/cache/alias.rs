//! Aliases: a caller's own fingerprint of a model (the Python package's FX-graph fingerprint:
//! graph code, weights, input signature, options) mapped to the [`CacheKey`] of its compiled
//! binary, so that a warm start finds the binary without exporting ONNX at all.
//!
//! Layout: `<dir>/fx/<fingerprint>.key` holding the key's 64 hex digits. Written atomically
//! (temporary file, then rename): concurrent writers leave one whole alias. An alias is only a
//! pointer: the entry it names is checked like any other on [`Cache::get`].

use std::path::PathBuf;

use super::{Cache, CacheError, CacheKey};

/// Whether `s` is a fingerprint: 64 lowercase hex digits (a sha256).
fn is_fingerprint(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The key an alias file's bytes name: 64 lowercase hex digits, surrounding whitespace allowed.
/// The file is in the cache folder, so nothing about it is trusted; `scripts/fuzz` runs this
/// (and [`Cache::get_alias`] on a file) on arbitrary bytes.
pub fn parse_alias(bytes: &[u8]) -> Option<CacheKey> {
    CacheKey::parse(std::str::from_utf8(bytes).ok()?.trim())
}

impl Cache {
    fn alias_dir(&self) -> PathBuf {
        self.dir().join("fx")
    }

    /// The file of alias `fingerprint`, if it is a valid fingerprint.
    pub fn alias_path(&self, fingerprint: &str) -> Option<PathBuf> {
        is_fingerprint(fingerprint).then(|| self.alias_dir().join(format!("{fingerprint}.key")))
    }

    /// The key alias `fingerprint` points at, if there is one (it may name an entry that is
    /// gone).
    pub fn get_alias(&self, fingerprint: &str) -> Option<CacheKey> {
        let path = self.alias_path(fingerprint)?;
        if let Some(why) = super::private::problem(&path) {
            tracing::warn!("context-binary cache: not using alias {fingerprint}: {why}");
            return None;
        }
        parse_alias(&std::fs::read(path).ok()?)
    }

    /// Points alias `fingerprint` at `key`.
    pub fn put_alias(&self, fingerprint: &str, key: &CacheKey) -> Result<(), CacheError> {
        let path = self.alias_path(fingerprint).ok_or_else(|| CacheError {
            action: "name an alias",
            path: self.alias_dir().join(fingerprint),
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "a fingerprint is 64 lowercase hex digits",
            ),
        })?;
        let dir = self.alias_dir();
        super::private::create_dir(&dir).map_err(CacheError::new("create directory", &dir))?;
        super::store::write_replacing(&path, key.as_str().as_bytes())
            .map_err(CacheError::new("write", &path))
    }

    /// Removes aliases whose entry is gone (or that do not parse): they would only cost a failed
    /// lookup. Returns how many were removed.
    pub fn remove_dangling_aliases(&self) -> usize {
        let Ok(files) = std::fs::read_dir(self.alias_dir()) else {
            return 0;
        };
        let mut removed = 0;
        for f in files.flatten() {
            let name = f.file_name();
            let Some(fingerprint) = name.to_str().and_then(|n| n.strip_suffix(".key")) else {
                continue;
            };
            if !is_fingerprint(fingerprint) {
                continue;
            }
            let live = self
                .get_alias(fingerprint)
                .is_some_and(|k| self.meta_path(&k).exists());
            if !live && std::fs::remove_file(f.path()).is_ok() {
                removed += 1;
            }
        }
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_round_trip_and_dangling_ones_are_removed() {
        let dir = std::env::temp_dir().join(format!("qnnx-alias-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cache = Cache::open(&dir, None).unwrap();
        let fp = "ab".repeat(32);
        let key = CacheKey::builder().model(b"m").build();
        assert_eq!(cache.get_alias(&fp), None);
        cache.put_alias(&fp, &key).unwrap();
        assert_eq!(cache.get_alias(&fp), Some(key));
        assert!(cache
            .put_alias("../escape", &CacheKey::builder().build())
            .is_err());
        assert!(cache.alias_path("../escape").is_none());
        // No entry for the key: the alias dangles.
        assert_eq!(cache.remove_dangling_aliases(), 1);
        assert_eq!(cache.get_alias(&fp), None);
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn alias_text_is_a_key_or_nothing() {
        let k = "ab".repeat(32);
        assert_eq!(parse_alias(k.as_bytes()), CacheKey::parse(&k));
        assert_eq!(
            parse_alias(format!(" {k}\n").as_bytes()),
            CacheKey::parse(&k)
        );
        for bad in [
            &b""[..],
            &b"\xff\xfe"[..],
            k.to_uppercase().as_bytes(),
            &k.as_bytes()[..63],
            format!("{k}0").as_bytes(),
        ] {
            assert_eq!(parse_alias(bad), None, "{bad:?}");
        }
    }
}
