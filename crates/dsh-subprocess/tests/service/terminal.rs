//! Children on a pseudo-terminal (`SpawnSpec::pty`): the terminal is their stdin, stdout,
//! stderr and controlling terminal; its output is collected as text; input is typed.

use std::time::Duration;

use dsh_subprocess::{PtySize, SpawnSpec, SubprocessService};

use crate::bash;

fn on_terminal(script: &str) -> SpawnSpec {
    let mut spec = bash(script);
    spec.pty = Some(PtySize::DEFAULT);
    spec.new_session = true;
    spec
}

/// Polls `what` every 20 ms for up to 10 s.
async fn eventually(mut what: impl FnMut() -> bool) -> bool {
    for _ in 0..500 {
        if what() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

fn stdout_text(handle: &dsh_subprocess::ProcessHandle) -> String {
    handle.stdout().collected().text
}

#[tokio::test]
async fn the_terminal_is_stdin_stdout_stderr_and_the_controlling_terminal() {
    let service = SubprocessService::new();
    let script = "for fd in 0 1 2; do [ -t $fd ] && printf 't%s ' $fd; done; \
                  stty size; printf '\\033[1;31mred\\033[0m\\r\\n'; tty >/dev/null && echo ctty; \
                  [ \"$(ps -o tpgid= -p $$ | tr -d ' ')\" = \"$(ps -o pgid= -p $$ | tr -d ' ')\" ] && echo foreground; \
                  echo err >&2";
    let handle = service.spawn(on_terminal(script)).expect("spawn");
    let outcome = handle.wait().await;
    assert_eq!(outcome.exit_code, Some(0));
    assert_eq!(stdout_text(&handle), "t0 t1 t2 40 120\nred\nctty\nforeground\nerr\n");
    assert_eq!(handle.stderr().collected().text, "");
    assert!(handle.is_terminal());
}

#[tokio::test]
async fn typed_input_is_echoed_read_and_waited_for() {
    let service = SubprocessService::new();
    let handle = service.spawn(on_terminal("read -p 'name? ' x; echo \"hi $x\"; sleep 30")).expect("spawn");
    // The prompt reaches the terminal before the read blocks; the harness may collect it a
    // little later.
    let prompted = eventually(|| handle.blocked_on_stdin() && stdout_text(&handle) == "name? ").await;
    assert!(prompted, "{:?}", stdout_text(&handle));
    assert_eq!(handle.write_stdin(b"ada\r").expect("write"), 4);
    assert!(eventually(|| stdout_text(&handle).contains("hi ada")).await, "{}", stdout_text(&handle));
    assert_eq!(stdout_text(&handle), "name? ada\nhi ada\n");
    assert!(!handle.blocked_on_stdin(), "sleeping is not waiting for input");
    handle.terminate();
    handle.wait().await;
}

#[tokio::test]
async fn ctrl_c_interrupts_the_foreground_job_and_ctrl_d_ends_input() {
    let service = SubprocessService::new();
    let script = "trap 'echo interrupted' INT; sleep 30 & echo ready; wait; cat; echo cat-done";
    let handle = service.spawn(on_terminal(script)).expect("spawn");
    // Ctrl-C once the trap is set and the shell is about to wait.
    assert!(eventually(|| stdout_text(&handle) == "ready\n").await, "{}", stdout_text(&handle));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(handle.interrupt());
    assert!(eventually(|| handle.blocked_on_stdin()).await, "{}", stdout_text(&handle));
    handle.write_stdin(b"line\r").expect("write");
    assert!(handle.close_stdin(), "Ctrl-D typed");
    let outcome = handle.wait().await;
    assert_eq!(outcome.exit_code, Some(0));
    assert_eq!(stdout_text(&handle), "ready\n^Cinterrupted\nline\nline\ncat-done\n");
}

#[tokio::test]
async fn a_cursor_position_query_is_answered() {
    let service = SubprocessService::new();
    let script = "stty -echo -icanon; printf '\\033[6n'; r=$(dd bs=6 count=1 2>/dev/null | od -An -c | tr -d ' '); echo \"$r\"";
    let handle = service.spawn(on_terminal(script)).expect("spawn");
    let outcome = tokio::time::timeout(Duration::from_secs(10), handle.wait()).await.expect("answered");
    assert_eq!(outcome.exit_code, Some(0));
    assert_eq!(stdout_text(&handle), "033[1;1R\n");
}

#[tokio::test]
async fn the_terminal_reaches_no_other_child() {
    let service = SubprocessService::new();
    let handle = service.spawn(on_terminal("sleep 30")).expect("spawn");
    let other = service.spawn(bash("ls /proc/self/fd | sort -n | tr '\\n' ' '")).expect("spawn");
    other.wait().await;
    assert_eq!(other.stdout().collected().text, "0 1 2 3 ");
    handle.terminate();
    handle.wait().await;
}
