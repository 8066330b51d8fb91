//! External data: the files an ONNX model keeps its large tensors in, read only from under the
//! model's folder, only when they are regular files, and only within their size.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Component, Path, PathBuf};

use crate::frontend::onnx::TensorProto;

/// Reads external data files for one model. A location is a file under the model's folder
/// (`base`) after every symlink is resolved, a regular file, and the range is inside it; all
/// three are checked before the file is opened, and the opened file is checked to be the one
/// that was examined, so a FIFO, a device or a link planted in place of a weights file is
/// refused instead of blocking the loader or being read as weights (which a MatMul with chosen
/// inputs would then copy to its output).
pub(super) struct ExternalData {
    base: Option<PathBuf>,
    /// `base` canonicalised, on first use.
    root: Option<PathBuf>,
    /// Open files by canonical path, with their size when checked.
    files: HashMap<PathBuf, (File, u64)>,
}

impl ExternalData {
    pub(super) fn new(base: Option<&Path>) -> Self {
        ExternalData {
            // `Path::parent` of a bare file name is "", which names no folder to canonicalise.
            base: base.map(|b| {
                if b.as_os_str().is_empty() {
                    PathBuf::from(".")
                } else {
                    b.to_path_buf()
                }
            }),
            root: None,
            files: HashMap::new(),
        }
    }

    pub(super) fn read(
        &mut self,
        t: &TensorProto,
        want: usize,
    ) -> std::result::Result<Vec<u8>, String> {
        let mut location = None;
        let mut offset = 0u64;
        let mut length = None;
        for kv in &t.external_data {
            let v = kv.value.as_deref().unwrap_or("");
            match kv.key.as_deref().unwrap_or("") {
                "location" => location = Some(v.to_string()),
                "offset" => {
                    offset = v
                        .parse()
                        .map_err(|_| format!("bad external offset '{v}'"))?
                }
                "length" => {
                    length = Some(
                        v.parse::<u64>()
                            .map_err(|_| format!("bad external length '{v}'"))?,
                    )
                }
                _ => {}
            }
        }
        let location = location.ok_or("external data has no 'location'")?;
        let rel = Path::new(&location);
        // Same rule as onnx.checker: data must live under the model's directory.
        if rel.is_absolute()
            || rel
                .components()
                .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
        {
            return Err(format!(
                "external data location '{location}' must be a relative path inside the model directory"
            ));
        }
        let base = self.base.as_ref().ok_or(
            "tensor uses external data but the model was loaded from bytes without a base directory",
        )?;
        let path = base.join(rel);
        let length = length.unwrap_or(want as u64);
        if length != want as u64 {
            return Err(format!(
                "external data length {length} does not match the {want} bytes the shape needs"
            ));
        }
        let root = match &self.root {
            Some(r) => r.clone(),
            None => {
                let r = std::fs::canonicalize(base).map_err(|e| {
                    format!("cannot resolve the model's folder {}: {e}", base.display())
                })?;
                self.root.insert(r).clone()
            }
        };
        // Resolves every symlink, of the file and of the folders on the way, without opening
        // anything.
        let real = std::fs::canonicalize(&path).map_err(|e| {
            format!(
                "external data '{location}': cannot resolve {}: {e}",
                path.display()
            )
        })?;
        if !real.starts_with(&root) {
            return Err(format!(
                "external data '{location}' ({}) resolves to {}, outside the model's folder {}",
                path.display(),
                real.display(),
                root.display()
            ));
        }
        let in_range = |size: u64| {
            if offset.checked_add(length).map_or(true, |end| end > size) {
                return Err(format!(
                    "external data '{location}' bytes {offset}..+{length} are outside the file {} ({size} bytes)",
                    real.display()
                ));
            }
            Ok(())
        };
        match self.files.get(&real) {
            Some(&(_, size)) => in_range(size)?,
            None => {
                let md = std::fs::metadata(&real)
                    .map_err(|e| format!("cannot stat {}: {e}", real.display()))?;
                if !md.is_file() {
                    return Err(format!(
                        "external data '{location}' ({}) is {}, not a regular file",
                        real.display(),
                        file_kind(&md)
                    ));
                }
                in_range(md.len())?;
                let f = open_examined(&real, &md)
                    .map_err(|e| format!("external data '{location}' ({}): {e}", real.display()))?;
                self.files.insert(real.clone(), (f, md.len()));
            }
        }
        let (f, _) = self.files.get_mut(&real).expect("inserted above");
        let mut buf = vec![0u8; want];
        f.seek(SeekFrom::Start(offset))
            .and_then(|_| f.read_exact(&mut buf))
            .map_err(|e| format!("cannot read {}: {e}", real.display()))?;
        Ok(buf)
    }
}

/// What a file that is not a regular file is, for error messages.
pub(super) fn file_kind(md: &std::fs::Metadata) -> &'static str {
    let t = md.file_type();
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "a FIFO";
        }
        if t.is_char_device() {
            return "a character device";
        }
        if t.is_block_device() {
            return "a block device";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    if t.is_dir() {
        "a directory"
    } else if t.is_symlink() {
        "a symbolic link"
    } else {
        "a special file"
    }
}

/// Opens the regular file `path` that `examined` describes and checks that what was opened is
/// that file. Non-blocking, so that a FIFO swapped in after the check cannot stall the open;
/// then the device and inode must match, so a file swapped in (a link to another file, a FIFO, a
/// device) is refused rather than read.
#[cfg(unix)]
pub(super) fn open_examined(
    path: &Path,
    examined: &std::fs::Metadata,
) -> std::result::Result<File, String> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| format!("cannot open: {e}"))?;
    let opened = f.metadata().map_err(|e| format!("cannot stat: {e}"))?;
    if !opened.is_file() || opened.dev() != examined.dev() || opened.ino() != examined.ino() {
        return Err("the file changed between its check and its opening; not reading it".into());
    }
    Ok(f)
}

/// Windows has no FIFOs or device nodes in folders; the file opened must still be a regular
/// file (its identity is not compared: that needs unstable APIs or unsafe code).
#[cfg(not(unix))]
pub(super) fn open_examined(
    path: &Path,
    _examined: &std::fs::Metadata,
) -> std::result::Result<File, String> {
    let f = File::open(path).map_err(|e| format!("cannot open: {e}"))?;
    let opened = f.metadata().map_err(|e| format!("cannot stat: {e}"))?;
    if !opened.is_file() {
        return Err(format!("is {}, not a regular file", file_kind(&opened)));
    }
    Ok(f)
}

#[cfg(test)]
mod tests {

    use std::path::{Path, PathBuf};

    use crate::frontend::onnx::{self, data_location};

    use super::*;
    use crate::frontend::load::Model;
    use crate::testing::relu_model;

    fn external_model(location: &str, offset: u64, len: u64) -> onnx::ModelProto {
        let mut b = relu_model();
        let t = onnx::TensorProto {
            name: Some("w".into()),
            dims: vec![2],
            data_type: Some(1),
            data_location: Some(data_location::EXTERNAL),
            external_data: [
                ("location", location.to_string()),
                ("offset", offset.to_string()),
                ("length", len.to_string()),
            ]
            .into_iter()
            .map(|(k, v)| onnx::StringStringEntryProto {
                key: Some(k.into()),
                value: Some(v),
            })
            .collect(),
            ..Default::default()
        };
        b.model.graph.as_mut().unwrap().initializer.push(t);
        b.model
    }

    #[test]
    fn external_data_with_offset() {
        let dir = std::env::temp_dir().join(format!("qnnx-ext-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut data = vec![0xAAu8; 16];
        data.extend_from_slice(&1.5f32.to_le_bytes());
        data.extend_from_slice(&(-2.0f32).to_le_bytes());
        std::fs::write(dir.join("w.bin"), &data).unwrap();
        let m = external_model("w.bin", 16, 8);
        std::fs::write(dir.join("m.onnx"), prost::Message::encode_to_vec(&m)).unwrap();
        let model = Model::load(dir.join("m.onnx")).unwrap();
        let w = model.graph.name_map()["w"];
        assert_eq!(model.graph.konst(w).unwrap().to_f64(), vec![1.5, -2.0]);

        let e = Model::from_proto(&external_model("w.bin", 20, 8), Some(&dir)).unwrap_err();
        assert!(e.to_string().contains("outside the file"), "{e}");
        let e = Model::from_proto(&external_model("w.bin", 0, 4), Some(&dir)).unwrap_err();
        assert!(e.to_string().contains("does not match"), "{e}");
        let e = Model::from_proto(&external_model("../w.bin", 0, 8), Some(&dir)).unwrap_err();
        assert!(e.to_string().contains("must be a relative path"), "{e}");
        let e = Model::from_proto(&external_model("w.bin", 0, 8), None).unwrap_err();
        assert!(e.to_string().contains("without a base directory"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A fresh folder holding `m.onnx`, whose initializer "w" (2 f32) reads `location` from
    /// byte `offset` on; returns the folder and the model's path.
    fn external_dir(case: &str, location: &str, offset: u64) -> (PathBuf, PathBuf) {
        let dir = std::env::temp_dir().join(format!("qnnx-ext-{case}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let model = dir.join("m.onnx");
        let m = external_model(location, offset, 8);
        std::fs::write(&model, prost::Message::encode_to_vec(&m)).unwrap();
        (dir, model)
    }

    /// Loads `model` on another thread: a load that blocks (on a FIFO, say) fails the test
    /// after 20 s instead of hanging it.
    fn load_err(model: &Path) -> String {
        let (tx, rx) = std::sync::mpsc::channel();
        let path = model.to_path_buf();
        std::thread::spawn(move || {
            let _ = tx.send(Model::load(path).map(|_| ()).map_err(|e| e.to_string()));
        });
        match rx.recv_timeout(std::time::Duration::from_secs(20)) {
            Ok(Ok(())) => panic!("{} loaded", model.display()),
            Ok(Err(e)) => e,
            Err(_) => panic!("loading {} blocked for 20 s", model.display()),
        }
    }

    #[cfg(unix)]
    fn outside_secret(case: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("qnnx-secret-{case}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("secret"), b"password").unwrap();
        dir
    }

    #[cfg(unix)]
    #[test]
    fn external_data_symlink_to_a_file_outside_is_refused() {
        let secret = outside_secret("link");
        let (dir, model) = external_dir("link", "w.bin", 0);
        std::os::unix::fs::symlink(secret.join("secret"), dir.join("w.bin")).unwrap();
        let e = load_err(&model);
        assert!(e.contains("initializer 'w'"), "{e}");
        assert!(e.contains("outside the model's folder"), "{e}");
        assert!(
            e.contains("w.bin") && e.contains(&secret.display().to_string()),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::remove_dir_all(&secret).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn external_data_through_a_symlinked_folder_outside_is_refused() {
        let secret = outside_secret("dirlink");
        let (dir, model) = external_dir("dirlink", "sub/secret", 0);
        std::os::unix::fs::symlink(&secret, dir.join("sub")).unwrap();
        let e = load_err(&model);
        assert!(e.contains("initializer 'w'"), "{e}");
        assert!(e.contains("outside the model's folder"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::remove_dir_all(&secret).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn external_data_symlink_inside_the_model_folder_is_read() {
        let (dir, model) = external_dir("inside", "w.bin", 0);
        std::fs::create_dir(dir.join("weights")).unwrap();
        let data = [1.5f32.to_le_bytes(), (-2.0f32).to_le_bytes()].concat();
        std::fs::write(dir.join("weights/real.bin"), data).unwrap();
        std::os::unix::fs::symlink("weights/real.bin", dir.join("w.bin")).unwrap();
        let m = Model::load(&*model).unwrap();
        let w = m.graph.name_map()["w"];
        assert_eq!(m.graph.konst(w).unwrap().to_f64(), vec![1.5, -2.0]);
        // The model folder itself reached through a symlink: still inside.
        let link = dir.with_extension("link");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        assert!(Model::load(link.join("m.onnx")).is_ok());
        std::fs::remove_file(&link).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn external_data_fifo_is_refused_without_blocking() {
        let (dir, model) = external_dir("fifo", "w.bin", 0);
        let fifo = dir.join("w.bin");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if !made.as_ref().is_ok_and(|s| s.success()) {
            eprintln!("skipped: mkfifo failed ({made:?})");
            return;
        }
        let e = load_err(&model);
        assert!(e.contains("initializer 'w'"), "{e}");
        assert!(e.contains("is a FIFO, not a regular file"), "{e}");
        assert!(e.contains(&fifo.display().to_string()), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn external_data_device_file_is_refused() {
        let (dir, model) = external_dir("dev", "w.bin", 0);
        // A /dev/zero (character device 1:5) inside the model folder; needs root or CAP_MKNOD.
        let made = std::process::Command::new("mknod")
            .arg(dir.join("w.bin"))
            .args(["c", "1", "5"])
            .output();
        if !made.as_ref().is_ok_and(|o| o.status.success()) {
            eprintln!("skipped: mknod failed (not root?): {made:?}");
            std::fs::remove_dir_all(&dir).unwrap();
            return;
        }
        let e = load_err(&model);
        assert!(e.contains("initializer 'w'"), "{e}");
        assert!(
            e.contains("is a character device, not a regular file"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn external_data_directory_is_refused() {
        let (dir, model) = external_dir("dir", "w.bin", 0);
        std::fs::create_dir(dir.join("w.bin")).unwrap();
        let e = load_err(&model);
        assert!(e.contains("initializer 'w'"), "{e}");
        assert!(e.contains("is a directory, not a regular file"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn external_data_range_outside_the_file_is_refused() {
        for (offset, case) in [(20, "end"), (64, "offset"), (u64::MAX - 2, "wrap")] {
            let (dir, model) = external_dir(&format!("range-{case}"), "w.bin", offset);
            std::fs::write(dir.join("w.bin"), [0u8; 24]).unwrap();
            let e = load_err(&model);
            assert!(e.contains("initializer 'w'"), "{e}");
            assert!(
                e.contains(&format!("external data 'w.bin' bytes {offset}..+8"))
                    && e.contains("outside the file")
                    && e.contains("(24 bytes)"),
                "{e}"
            );
            assert!(e.contains(&dir.join("w.bin").display().to_string()), "{e}");
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }

    #[test]
    fn external_data_file_swapped_after_its_check_is_not_read() {
        let (dir, _) = external_dir("swap", "w.bin", 0);
        let (a, b) = (dir.join("a.bin"), dir.join("b.bin"));
        std::fs::write(&a, [0u8; 8]).unwrap();
        std::fs::write(&b, [0u8; 8]).unwrap();
        // What `read` examined was b; what is at the path when it opens is a.
        let examined = std::fs::metadata(&b).unwrap();
        let r = open_examined(&a, &examined);
        if cfg!(unix) {
            let e = r.unwrap_err();
            assert!(
                e.contains("changed between its check and its opening"),
                "{e}"
            );
        }
        assert!(open_examined(&a, &std::fs::metadata(&a).unwrap()).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
