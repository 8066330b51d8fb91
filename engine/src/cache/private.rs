//! The cache holds every cached model's weights and binaries that the QNN library executes, so
//! it is private to its user: folders are created 0700 and files 0600, and a folder or entry
//! that someone else owns or could write is not used (as ssh's StrictModes refuses keys), with
//! one warning naming the path and what is wrong.
//!
//! Windows: files and folders get the user's default ACL (the profile's `LocalAppData` is
//! private to the user by default); ownership and ACLs are not checked there.

use std::fs;
use std::io;
use std::path::Path;

/// Creates `dir` and its missing parents; on Unix the ones created are mode 0700.
pub(super) fn create_dir(dir: &Path) -> io::Result<()> {
    let mut b = fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
    b.create(dir)
}

/// Options that create a file of mode 0600 on Unix.
pub(super) fn file_options() -> fs::OpenOptions {
    #[cfg_attr(not(unix), allow(unused_mut))]
    let mut o = fs::OpenOptions::new();
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
    o
}

/// Why `path` must not be used: owned by another user, or writable by group or others. `None`
/// when it is fine or does not exist (nothing to refuse yet). Follows symlinks, as reading the
/// file would.
#[cfg(unix)]
pub(super) fn problem(path: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let m = fs::metadata(path).ok()?;
    let me = rustix::process::geteuid().as_raw();
    if m.uid() != me {
        return Some(format!(
            "{} is owned by uid {}, not by you (uid {me})",
            path.display(),
            m.uid()
        ));
    }
    let mode = m.mode() & 0o777;
    if mode & 0o022 != 0 {
        return Some(format!(
            "{} is writable by {} (mode {mode:03o})",
            path.display(),
            if mode & 0o020 != 0 {
                "its group"
            } else {
                "others"
            }
        ));
    }
    None
}

#[cfg(not(unix))]
pub(super) fn problem(_path: &Path) -> Option<String> {
    None
}

/// Makes `path` (owned by this user, as [`problem`] checked) private: 0700 for folders, 0600
/// for files. Entries written by earlier versions were 0755/0644 (the umask's defaults); best
/// effort, a failure leaves the mode as it was.
#[cfg(unix)]
pub(super) fn tighten(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(m) = fs::metadata(path) else { return };
    let want = if m.is_dir() { 0o700 } else { 0o600 };
    if m.permissions().mode() & 0o777 != want {
        let _ = fs::set_permissions(path, fs::Permissions::from_mode(want));
    }
}

#[cfg(not(unix))]
pub(super) fn tighten(_path: &Path) {}

/// The error [`super::Cache::open`] returns for a folder it refuses.
pub(super) fn refused(path: &Path, why: String) -> super::CacheError {
    super::CacheError {
        action: "trust",
        path: path.to_path_buf(),
        source: io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{why}; a cache folder must be yours and not writable by others, since QNN \
                 executes the binaries in it (compiling without the cache)"
            ),
        ),
    }
}

#[cfg(all(test, unix))]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn temp(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("qnnx-private-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn created_folders_and_files_are_private() {
        let d = temp("create");
        create_dir(&d.join("a/b")).unwrap();
        for p in [d.join("a"), d.join("a/b")] {
            assert_eq!(
                fs::metadata(&p).unwrap().permissions().mode() & 0o777,
                0o700
            );
        }
        let f = d.join("a/b/f");
        file_options().write(true).create(true).open(&f).unwrap();
        assert_eq!(
            fs::metadata(&f).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(problem(&f), None);
        fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn group_or_world_writable_paths_are_refused_and_tightened() {
        let d = temp("writable");
        create_dir(&d).unwrap();
        fs::set_permissions(&d, fs::Permissions::from_mode(0o777)).unwrap();
        let why = problem(&d).expect("refused");
        assert!(
            why.contains("writable by its group") && why.contains("777"),
            "{why}"
        );
        fs::set_permissions(&d, fs::Permissions::from_mode(0o702)).unwrap();
        assert!(problem(&d).unwrap().contains("writable by others"));
        fs::set_permissions(&d, fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(problem(&d), None, "readable is not refused, only tightened");
        tighten(&d);
        assert_eq!(
            fs::metadata(&d).unwrap().permissions().mode() & 0o777,
            0o700
        );
        fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn paths_of_another_user_are_refused() {
        if rustix::process::geteuid().as_raw() != 0 {
            eprintln!("skipped: only root can give a file to another user");
            return;
        }
        let d = temp("owner");
        create_dir(&d).unwrap();
        std::os::unix::fs::chown(&d, Some(65534), None).unwrap();
        let why = problem(&d).expect("refused");
        assert!(why.contains("owned by uid 65534"), "{why}");
        fs::remove_dir_all(&d).ok();
    }
}
