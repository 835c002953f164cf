//! Fixture trees for the tests: found in the repository, copied to a temp dir, read back
//! byte for byte.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

pub fn fixture(host: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/hosts")
        .join(host)
}

/// Copies a tree (links kept as links) into a fresh temp dir.
pub fn copy_tree(from: &Path) -> tempfile::TempDir {
    fn copy(from: &Path, to: &Path) {
        for e in fs::read_dir(from).unwrap() {
            let e = e.unwrap();
            let (src, dst) = (e.path(), to.join(e.file_name()));
            let ft = e.file_type().unwrap();
            if ft.is_symlink() {
                std::os::unix::fs::symlink(fs::read_link(&src).unwrap(), &dst).unwrap();
            } else if ft.is_dir() {
                fs::create_dir(&dst).unwrap();
                copy(&src, &dst);
            } else {
                fs::copy(&src, &dst).unwrap();
            }
        }
    }
    let dir = tempfile::tempdir().unwrap();
    copy(from, dir.path());
    dir
}

/// Every file's bytes and every link's target, by relative path.
pub fn contents(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for e in fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().to_path_buf();
            let ft = e.file_type().unwrap();
            if ft.is_symlink() {
                let mut t = b"link:".to_vec();
                t.extend(fs::read_link(&p).unwrap().to_string_lossy().bytes());
                out.insert(rel, t);
            } else if ft.is_dir() {
                walk(root, &p, out);
            } else {
                out.insert(rel, fs::read(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}
