//! Every committed seed input (`fuzz/corpus/TARGET/*`) through its target's body, on stable:
//! the bodies the fuzz binaries run are compiled and exercised by `cargo test`, and every
//! target has seeds to start from.

use std::path::{Path, PathBuf};

fn corpus_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus")
}

#[test]
fn every_seed_runs_through_its_target() {
    let mut seeds = 0;
    for (name, body) in msgbench_fuzz_targets::TARGETS {
        let dir = corpus_root().join(name);
        let entries = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e} (every target needs seeds)", dir.display()));
        let mut files: Vec<PathBuf> = entries.map(|e| e.unwrap().path()).collect();
        files.sort();
        assert!(
            !files.is_empty(),
            "{name}: no seed inputs in {}",
            dir.display()
        );
        for f in files {
            let data = std::fs::read(&f).unwrap();
            body(&data);
            seeds += 1;
        }
    }
    assert!(seeds >= msgbench_fuzz_targets::TARGETS.len());
}

#[test]
fn every_target_has_a_fuzz_binary() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/fuzz_targets");
    for (name, _) in msgbench_fuzz_targets::TARGETS {
        let bin = dir.join(format!("{name}.rs"));
        let text =
            std::fs::read_to_string(&bin).unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
        let call = format!("msgbench_fuzz_targets::{name}(data)");
        assert!(
            text.contains(&call),
            "{} must run target {name}",
            bin.display()
        );
    }
}
