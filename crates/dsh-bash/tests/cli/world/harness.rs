//! The harness's own holes, tried by a confined command: it cannot steer where the harness
//! writes its spill files, nor use a descriptor the harness inherited from whoever started it.

use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;

use super::cell::{Mode, Outcome, World};
use super::host::q;
use super::matrix::{Skip, over_matrix};

/// The spill file a truncated result names.
fn spill_path(out: &Outcome) -> String {
    let text = &out.text;
    let start = text.find("full output: ").map(|i| i + "full output: ".len());
    let end = start.and_then(|s| text[s..].find(']').map(|e| s + e));
    match (start, end) {
        (Some(s), Some(e)) => text[s..e].to_owned(),
        _ => panic!("no spill file named in {out:#?}"),
    }
}

/// One `batch` (one harness, one spill directory): a truncated output names its spill file;
/// the next command tries to swap the spill directory (visible to it below its `/tmp`) for a
/// symlink to a directory of its choosing; the next truncated output must still land in the
/// harness's own directory, and nothing in the chosen one.
fn attack_spill_directory(world: &World) -> Result<(), Skip> {
    let swap = format!(
        "for d in /tmp/dsh-subprocess-*; do mv \"$d\" \"$d.old\" 2>/dev/null; rm -rf \"$d\" 2>/dev/null; \
         ln -s {} \"$d\" 2>/dev/null && echo \"swapped $d\"; done; echo tried",
        q(world.outside.display())
    );
    let long = "seq 1 40000";
    let answers = world.batch(&[("s", long), ("s", &swap), ("s", long)]);
    let (first, second) = (spill_path(&answers[0]), spill_path(&answers[2]));
    assert_eq!(answers[1].ok(), "tried\n", "the command could touch the spill directory: {answers:#?}");
    let dir = |p: &str| std::path::Path::new(p).parent().map(std::path::Path::to_path_buf);
    assert_eq!(dir(&first), dir(&second), "the spill directory changed: {answers:#?}");
    assert!(std::path::Path::new(&second).is_file(), "the second spill file is missing: {second}");
    let planted: Vec<_> = std::fs::read_dir(&world.outside).expect("read outside").collect();
    assert!(planted.is_empty(), "the harness wrote into the command's chosen directory: {planted:?}");
    Ok(())
}

/// `dsh-bash call` started with descriptor 7 open for appending to a file outside the
/// workspace: the confined command cannot write through it.
fn attack_inherited_descriptor(world: &World) -> Result<(), Skip> {
    let victim = world.outside.join("victim");
    std::fs::write(&victim, "precious\n").expect("write victim");
    world.give(&victim);
    let file = std::fs::OpenOptions::new().append(true).open(&victim).expect("open victim");
    let raw = file.as_raw_fd();
    let mut command = world.dsh(&world.call_args(
        Mode::WorkspaceWrite,
        None,
        "echo pwned >&7 && echo wrote || echo refused",
    ));
    // SAFETY: dup2 is async-signal-safe; the new descriptor 7 has no close-on-exec flag, as
    // a descriptor inherited from a shell would.
    unsafe {
        command.pre_exec(
            move || {
                if libc::dup2(raw, 7) < 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) }
            },
        );
    }
    let out = Outcome::parse(&command.output().expect("spawn dsh-bash"));
    drop(file);
    assert!(out.ok().ends_with("refused\n"), "the command wrote through descriptor 7: {out:#?}");
    assert_eq!(std::fs::read_to_string(&victim).expect("read victim"), "precious\n");
    Ok(())
}

#[test]
fn world_cannot_steer_the_harness_spill_directory() {
    over_matrix("world_cannot_steer_the_harness_spill_directory", attack_spill_directory);
}

#[test]
fn world_cannot_use_a_descriptor_the_harness_inherited() {
    over_matrix("world_cannot_use_a_descriptor_the_harness_inherited", attack_inherited_descriptor);
}
