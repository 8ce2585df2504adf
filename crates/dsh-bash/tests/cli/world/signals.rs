//! The command's signals are its own: a harness that ignores the termination signals (started
//! in the background by a shell, or under `nohup`) runs confined commands that still trap and
//! receive them.

use std::os::unix::process::CommandExt;

use super::cell::{Mode, Outcome, World};
use super::matrix::{Skip, over_matrix};

const IGNORED: [libc::c_int; 4] = [libc::SIGINT, libc::SIGQUIT, libc::SIGHUP, libc::SIGTERM];

fn attack_inherited_ignores(world: &World) -> Result<(), Skip> {
    let script = "for s in INT QUIT HUP TERM; do trap \"echo caught $s\" $s; kill -s $s $$; done
grep -E '^Sig(Blk|Ign):' /proc/self/status";
    let mut command = world.dsh(&world.call_args(Mode::WorkspaceWrite, None, script));
    // SAFETY: between fork and exec, only `signal(2)` calls, which are async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            for signal in IGNORED {
                libc::signal(signal, libc::SIG_IGN);
            }
            Ok(())
        });
    }
    let out = Outcome::parse(&command.output().expect("spawn dsh-bash"));
    let text = out.ok();
    let (traps, status) = text.split_at(text.find("SigBlk:").unwrap_or(text.len()));
    assert_eq!(traps, "caught INT\ncaught QUIT\ncaught HUP\ncaught TERM\n", "{out:#?}");
    let mask = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
            .unwrap_or_else(|| panic!("{name} in {out:#?}"))
    };
    // `grep` is bash's child: bash blocks nothing and ignores nothing for it. Nothing at all:
    // not even the C library's own signals (32 and 33), which a harness started by that
    // library's `posix_spawn` (as this test binary was, by cargo) has ignored.
    assert_eq!(mask("SigBlk:"), 0, "{out:#?}");
    assert_eq!(mask("SigIgn:"), 0, "{out:#?}");
    Ok(())
}

#[test]
fn world_traps_the_signals_its_harness_ignores() {
    over_matrix("world_traps_the_signals_its_harness_ignores", attack_inherited_ignores);
}
