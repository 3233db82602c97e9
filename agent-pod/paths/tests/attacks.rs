//! Escape attempts against a real directory tree: every way out of the root a caller
//! could name is refused by the kernel's resolution, including while another thread
//! swaps a component for a symlink.

use std::{
    fs,
    os::unix::fs::{MetadataExt, symlink},
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

use rustix::fs::{CWD, RenameFlags};
use saint_paths::{BeneathPath, PathError, Workspace, WorkspacePath};

const SECRET: &str = "OUTSIDE-SECRET";

struct Tree {
    _base: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
}

/// base/root is the root; base/outside holds what no caller may reach.
fn tree() -> Tree {
    let base = tempfile::tempdir().unwrap();
    let root = base.path().canonicalize().unwrap().join("root");
    let outside = base.path().canonicalize().unwrap().join("outside");
    fs::create_dir_all(root.join("repo/src")).unwrap();
    fs::create_dir_all(outside.join("inner")).unwrap();
    fs::write(outside.join("secret.txt"), SECRET).unwrap();
    fs::write(root.join("repo/README.md"), "inside\n").unwrap();
    symlink(&outside, root.join("absolute_link")).unwrap();
    symlink("../outside", root.join("relative_link")).unwrap();
    symlink("repo", root.join("inner_link")).unwrap();
    symlink("loop_b", root.join("loop_a")).unwrap();
    symlink("loop_a", root.join("loop_b")).unwrap();
    symlink("/proc/self/root", root.join("proc_link")).unwrap();
    symlink(outside.join("secret.txt"), root.join("repo/secret_link")).unwrap();
    Tree {
        _base: base,
        root,
        outside,
    }
}

fn open_directory(workspace: &Workspace, raw: &str) -> Result<PathBuf, PathError> {
    let (_, path) = BeneathPath::parse_absolute(raw, &[Path::new("/workspace")])?;
    workspace
        .open_directory(&path, raw)
        .map(|directory| directory.path().to_path_buf())
}

#[test]
fn directories_inside_the_root_open_and_name_themselves() {
    let tree = tree();
    let workspace = Workspace::open(&tree.root).unwrap();
    assert_eq!(
        open_directory(&workspace, "/workspace"),
        Ok(tree.root.clone())
    );
    assert_eq!(
        open_directory(&workspace, "/workspace/repo/src/"),
        Ok(tree.root.join("repo/src"))
    );
}

#[test]
fn every_symlink_on_the_way_is_refused() {
    let tree = tree();
    let workspace = Workspace::open(&tree.root).unwrap();
    for name in [
        "absolute_link",
        "relative_link",
        "inner_link",
        "loop_a",
        "proc_link",
        "absolute_link/inner",
    ] {
        let raw = format!("/workspace/{name}");
        assert_eq!(
            open_directory(&workspace, &raw),
            Err(PathError::Symlink(raw.clone())),
            "{name}"
        );
    }
    let path = WorkspacePath::parse("repo/secret_link", &tree.root).unwrap();
    assert_eq!(
        workspace.read_text(&path, 1_000),
        Err(PathError::Symlink("repo/secret_link".to_string()))
    );
    let through = WorkspacePath::parse("absolute_link/secret.txt", &tree.root).unwrap();
    assert!(matches!(
        workspace.read_text(&through, 1_000),
        Err(PathError::Symlink(_))
    ));
}

#[test]
fn dot_dots_and_encoded_forms_never_reach_the_filesystem() {
    let tree = tree();
    let workspace = Workspace::open(&tree.root).unwrap();
    assert!(matches!(
        open_directory(&workspace, "/workspace/../outside"),
        Err(PathError::ParentComponent(_))
    ));
    assert!(matches!(
        open_directory(&workspace, "/workspace/%2e%2e/outside"),
        Err(PathError::SuspiciousCharacters(_))
    ));
    assert!(matches!(
        open_directory(&workspace, "/workspace/repo\\..\\..\\outside"),
        Err(PathError::SuspiciousCharacters(_))
    ));
    let outside = tree.outside.display().to_string();
    assert!(matches!(
        open_directory(&workspace, &outside),
        Err(PathError::OutsideWorkspace(_))
    ));
}

#[test]
fn missing_directories_and_files_are_told_apart() {
    let tree = tree();
    let workspace = Workspace::open(&tree.root).unwrap();
    assert_eq!(
        open_directory(&workspace, "/workspace/repo/README.md"),
        Err(PathError::NotDirectory(
            "/workspace/repo/README.md".to_string()
        ))
    );
    assert_eq!(
        open_directory(&workspace, "/workspace/missing"),
        Err(PathError::NotFound("/workspace/missing".to_string()))
    );
    assert_eq!(
        open_directory(&workspace, "/workspace/repo/README.md/below"),
        Err(PathError::NotFound(
            "/workspace/repo/README.md/below".to_string()
        ))
    );
}

#[test]
fn files_are_read_written_and_removed_only_beneath_the_root() {
    let tree = tree();
    let workspace = Workspace::open(&tree.root).unwrap();
    let path = WorkspacePath::parse("/agent/notes/new.md", &tree.root).unwrap();
    workspace.write(&path, b"hello", true).unwrap();
    assert_eq!(workspace.read_text(&path, 100).unwrap(), "hello");
    assert_eq!(workspace.exists(&path), Ok(true));
    workspace.remove(&path).unwrap();
    assert_eq!(workspace.exists(&path), Ok(false));
    // A write through a symlinked directory never creates anything outside.
    let through = WorkspacePath::parse("relative_link/planted.txt", &tree.root).unwrap();
    assert!(
        workspace
            .write(&through, b"x", true)
            .unwrap_err()
            .is_refusal()
    );
    assert!(!tree.outside.join("planted.txt").exists());
}

/// A second thread keeps exchanging `flip` (a real directory) with a symlink to the
/// outside tree; whatever the interleaving, an open either refuses or yields the inside
/// directory, never the outside one.
#[test]
fn a_component_swapped_for_a_symlink_mid_walk_never_leads_outside() {
    let tree = tree();
    fs::create_dir_all(tree.root.join("flip/inner")).unwrap();
    symlink(&tree.outside, tree.root.join("flip_link")).unwrap();
    let inside_inode = fs::metadata(tree.root.join("flip/inner")).unwrap().ino();
    let outside_inode = fs::metadata(tree.outside.join("inner")).unwrap().ino();
    let workspace = Workspace::open(&tree.root).unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let stop = stop.clone();
        let (flip, link) = (tree.root.join("flip"), tree.root.join("flip_link"));
        thread::spawn(move || {
            let mut swaps = 0_u64;
            while !stop.load(Ordering::Relaxed) {
                rustix::fs::renameat_with(CWD, &flip, CWD, &link, RenameFlags::EXCHANGE)
                    .expect("renameat2(RENAME_EXCHANGE)");
                swaps += 1;
            }
            swaps
        })
    };

    let (mut opened, mut refused) = (0_u32, 0_u32);
    let deadline = Instant::now() + Duration::from_secs(20);
    while (opened < 50 || refused < 50) && Instant::now() < deadline {
        let (_, path) =
            BeneathPath::parse_absolute("/workspace/flip/inner", &[Path::new("/workspace")])
                .unwrap();
        match workspace.open_directory(&path, "/workspace/flip/inner") {
            Ok(directory) => {
                let inode = rustix::fs::fstat(&directory).unwrap().st_ino;
                assert_ne!(inode, outside_inode, "opened the outside directory");
                assert_eq!(inode, inside_inode);
                assert_eq!(directory.path(), tree.root.join("flip/inner"));
                opened += 1;
            }
            Err(error) => {
                assert!(
                    matches!(
                        error,
                        PathError::Symlink(_) | PathError::NotFound(_) | PathError::Io { .. }
                    ),
                    "{error:?}"
                );
                refused += 1;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    assert!(
        opened >= 50 && refused >= 50,
        "the race was not exercised: {opened} opened, {refused} refused, {swaps} swaps"
    );
}

/// After the check, the directory's name is pointed outside (the directory moved away,
/// a symlink to the outside tree put in its place). A command started through
/// `entry_path` still runs in the checked directory; one started by name would not.
#[test]
fn a_command_enters_the_checked_directory_even_after_its_name_is_swapped() {
    let tree = tree();
    fs::create_dir_all(tree.root.join("work")).unwrap();
    let workspace = Workspace::open(&tree.root).unwrap();
    let (_, path) =
        BeneathPath::parse_absolute("/workspace/work", &[Path::new("/workspace")]).unwrap();
    let directory = workspace.open_directory(&path, "/workspace/work").unwrap();

    fs::rename(tree.root.join("work"), tree.root.join("moved")).unwrap();
    symlink(&tree.outside, tree.root.join("work")).unwrap();

    let physical_cwd = |directory: &Path| {
        let output = std::process::Command::new("/bin/pwd")
            .arg("-P")
            .current_dir(directory)
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        PathBuf::from(String::from_utf8(output.stdout).unwrap().trim_end())
    };
    assert_eq!(
        physical_cwd(&directory.entry_path()),
        tree.root.join("moved")
    );
    // The name alone now leads outside: this is what entry_path protects against.
    assert_eq!(physical_cwd(directory.path()), tree.outside);
}
