//! The host's kernel state beyond its files stays out of reach: its hostname and domain name,
//! its sysctls (`/proc/sys`), its SysV IPC objects and POSIX message queues, and no file a
//! command writes comes out setuid, setgid or with a file capability. The command holds no
//! capability, and where it runs as root its securebits are locked.
//!
//! Each attack goes in through every front door of the built binary: `call`, `call` under
//! `read-only` with `--network deny` where the attack writes no file, `batch`, and the MCP
//! server on stdio.

use std::ffi::CString;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use super::cell::{Mode, Outcome, Runner, User, World};
use super::host::{self, verdicts};
use super::matrix::{Skip, over_matrix};

/// Runs `command` through every front door: `(door, outcome)` for each. `read_only` adds a
/// `call` under `read-only` with `--network deny`. `command` gets the door's name, so a
/// command that writes files can keep each door's apart.
fn through_every_door(
    world: &World,
    read_only: bool,
    command: impl Fn(&str) -> String,
) -> Vec<(String, Outcome)> {
    let mut outcomes = vec![("call".to_owned(), world.call(Mode::WorkspaceWrite, None, &command("call")))];
    if read_only {
        let mut args: Vec<String> = vec!["--network".into(), "deny".into()];
        args.extend(world.call_args(Mode::ReadOnly, None, &command("ro")));
        let output = world.dsh(&args).output().expect("spawn dsh-bash");
        outcomes.push(("call read-only --network deny".to_owned(), Outcome::parse(&output)));
    }
    let batch = command("batch");
    let mut answers = world.batch(&[("s1", batch.as_str())]);
    outcomes.push(("batch".to_owned(), answers.remove(0)));
    outcomes.push(("mcp".to_owned(), mcp_call(world, &command("mcp"))));
    outcomes
}

/// One `bash` call through `dsh-bash --sandbox workspace-write mcp` on stdio.
fn mcp_call(world: &World, command: &str) -> Outcome {
    let args: Vec<String> = vec!["--sandbox".into(), Mode::WorkspaceWrite.name().into(), "mcp".into()];
    let mut child =
        world.dsh(&args).stdin(Stdio::piped()).stderr(Stdio::null()).spawn().expect("spawn dsh-bash mcp");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut response = |id: i64| -> Value {
        loop {
            let mut line = String::new();
            assert!(
                stdout.read_line(&mut line).expect("read mcp") > 0,
                "the MCP server ended before answering {id}"
            );
            let message: Value = serde_json::from_str(&line).expect("a JSON-RPC line");
            if message["id"] == json!(id) && message.get("method").is_none() {
                return message;
            }
        }
    };
    let messages = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "bash", "arguments": {
            "command": command, "description": "d", "timeoutMs": 60000}}}),
    ];
    writeln!(stdin, "{}", messages[0]).expect("write initialize");
    response(1);
    for message in &messages[1..] {
        writeln!(stdin, "{message}").expect("write mcp");
    }
    let result = response(2)["result"].clone();
    drop(stdin);
    let _ = child.kill();
    let _ = child.wait();
    Outcome::from_value(&json!({
        "content": result["content"],
        "isError": result["isError"],
        "structured": result["structuredContent"],
    }))
}

/// Restores the host's hostname and domain name when dropped (also on a panic), writing back
/// what they were when it was made — only if a command changed them.
struct HostNames {
    saved: Vec<(&'static str, String)>,
}

const NAME_FILES: [&str; 2] = ["/proc/sys/kernel/hostname", "/proc/sys/kernel/domainname"];

impl HostNames {
    fn record() -> HostNames {
        let saved = NAME_FILES
            .iter()
            .map(|f| (*f, std::fs::read_to_string(f).unwrap_or_else(|e| panic!("read {f}: {e}"))))
            .collect();
        HostNames { saved }
    }

    /// The files whose value differs from the recorded one.
    fn changed(&self) -> Vec<String> {
        self.saved
            .iter()
            .filter(|(f, value)| std::fs::read_to_string(f).ok().as_ref() != Some(value))
            .map(|(f, value)| {
                format!(
                    "{f} (was {:?}, now {:?})",
                    value.trim(),
                    std::fs::read_to_string(f).unwrap_or_default().trim()
                )
            })
            .collect()
    }
}

impl Drop for HostNames {
    fn drop(&mut self) {
        for (file, value) in &self.saved {
            if std::fs::read_to_string(file).ok().as_ref() != Some(value) {
                let _ = std::fs::write(file, value.trim_end_matches('\n'));
            }
        }
    }
}

/// `SECBIT_NOROOT`, `SECBIT_NO_SETUID_FIXUP`, `SECBIT_NO_CAP_AMBIENT_RAISE`, each locked, and
/// `SECBIT_KEEP_CAPS_LOCKED`: what a command that ran as root (in its namespace) must show.
const LOCKED_SECUREBITS: u32 = 0xef;

fn attack_kernel_settings(world: &World) -> Result<(), Skip> {
    for tool in ["python3", "hostname"] {
        world.require(tool)?;
    }
    let names = HostNames::record();
    let host_uts = host_namespace("uts");
    let outcomes = through_every_door(world, true, |_| {
        format!(
            r#"[ "$(readlink /proc/self/ns/uts)" = '{host_uts}' ] && echo "uts namespace: host's" || echo 'uts namespace: own'
for name in hostname domainname; do
  (echo dsh-attack > /proc/sys/kernel/$name) 2>/dev/null && echo "write $name: DONE" || echo "write $name: refused"
done
(exec 3>>/proc/sys/kernel/core_pattern) 2>/dev/null && echo 'open core_pattern: DONE' || echo 'open core_pattern: refused'
for file in sysrq-trigger sys/vm/drop_caches; do
  [ -e /proc/$file ] || continue
  (exec 3>>/proc/$file) 2>/dev/null && echo "open $file: DONE" || echo "open $file: refused"
done
hostname dsh-attack 2>/dev/null && echo 'sethostname: DONE' || echo 'sethostname: refused'
grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb):' /proc/self/status | tr -d '\t' | sed 's/:/: /'
python3 -c 'import ctypes; print("securebits: %#x" % ctypes.CDLL(None).prctl(27, 0, 0, 0, 0))'
"#
        )
    });
    let changed = names.changed();
    drop(names);
    assert!(
        changed.is_empty(),
        "a confined command changed the host's {changed:?} (restored): {outcomes:#?}"
    );
    // A command that runs as root (the harness's own root, or root of the user namespace the
    // in-process runner makes for an unprivileged harness) locks its securebits; bubblewrap
    // maps an unprivileged harness to its own uid, where no securebit applies.
    let securebits = match (world.cell.runner, world.cell.user) {
        (Runner::Bwrap, User::Nobody) => "0x0".to_owned(),
        _ => format!("{LOCKED_SECUREBITS:#x}"),
    };
    let mut expected: Vec<(String, String)> = vec![
        ("uts namespace".into(), "own".into()),
        ("write hostname".into(), "refused".into()),
        ("write domainname".into(), "refused".into()),
        ("open core_pattern".into(), "refused".into()),
    ];
    for file in ["sysrq-trigger", "sys/vm/drop_caches"] {
        if Path::new("/proc").join(file).exists() {
            expected.push((format!("open {file}"), "refused".into()));
        }
    }
    expected.push(("sethostname".into(), "refused".into()));
    for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        expected.push((set.into(), "0000000000000000".into()));
    }
    expected.push(("securebits".into(), securebits));
    for (door, out) in &outcomes {
        assert_eq!(verdicts(out.ok()), expected, "through {door}: {out:#?}");
    }
    Ok(())
}

#[test]
fn world_cannot_change_the_hosts_kernel_settings_or_hold_a_capability() {
    over_matrix("world_cannot_change_the_hosts_kernel_settings_or_hold_a_capability", attack_kernel_settings);
}

/// The test's own namespace of `kind` as `/proc/self/ns/KIND` names it (`uts:[4026531838]`).
fn host_namespace(kind: &str) -> String {
    let link = std::fs::read_link(format!("/proc/self/ns/{kind}")).expect("read /proc/self/ns");
    link.display().to_string()
}

/// Runs a python script on the host (as root, the test's own user) and returns its stdout.
#[track_caller]
fn host_python(script: &str) -> String {
    let output = Command::new("python3").args(["-c", script]).output().expect("spawn python3");
    assert!(
        output.status.success(),
        "host python failed: {script}\nstderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The python prelude both sides use: libc's SysV calls and librt's message queues.
const IPC_PRELUDE: &str = r#"
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
rt = ctypes.CDLL("librt.so.1", use_errno=True)
libc.shmat.restype = ctypes.c_void_p
libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
libc.shmdt.argtypes = [ctypes.c_void_p]
rt.mq_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p]
rt.mq_send.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint]
class MqAttr(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_long), ("maxmsg", ctypes.c_long), ("msgsize", ctypes.c_long), ("curmsgs", ctypes.c_long), ("pad", ctypes.c_long * 4)]
def err():
    import errno
    e = ctypes.get_errno()
    return errno.errorcode.get(e, str(e))
"#;

/// The IPC objects the host makes (mode 0666, so only the sandbox keeps a command out) and
/// removes when dropped (also on a panic).
struct HostIpc {
    shm_id: i32,
    shm_key: String,
    msg_id: i32,
    msg_key: String,
    mq_name: String,
}

impl HostIpc {
    fn create() -> HostIpc {
        let make = |flag: &str| -> (i32, String) {
            let out = Command::new("ipcmk").args([flag, "-p", "0666"]).output().expect("ipcmk");
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success(), "ipcmk {flag}: {text}");
            let id: i32 =
                text.trim().rsplit(' ').next().and_then(|id| id.parse().ok()).expect("ipcmk printed an id");
            (id, key_of(flag, id).expect("ipcs lists the new object"))
        };
        let (shm_id, shm_key) = make("-M4096");
        let (msg_id, msg_key) = make("-Q");
        let mq_name = format!("/{}", host::unique("dsh-test-mq"));
        host_python(&format!(
            "{IPC_PRELUDE}\nos.umask(0)\nfd = rt.mq_open({mq_name:?}.encode(), os.O_CREAT | os.O_RDWR, 0o666, None)\nassert fd >= 0, err()\n"
        ));
        HostIpc { shm_id, shm_key, msg_id, msg_key, mq_name }
    }

    /// What the host sees of its objects now: the segment's first bytes, the messages waiting
    /// in each queue.
    fn state(&self) -> String {
        let seen = host_python(&format!(
            r#"{IPC_PRELUDE}
addr = libc.shmat({shm}, None, 0o10000)
assert addr not in (None, ctypes.c_void_p(-1).value), err()
print("shm:", ctypes.string_at(addr, 8).hex())
libc.shmdt(addr)
fd = rt.mq_open({mq:?}.encode(), os.O_RDONLY, 0, None)
assert fd >= 0, err()
attr = MqAttr()
rt.mq_getattr(fd, ctypes.byref(attr))
print("mq:", attr.curmsgs)
"#,
            shm = self.shm_id,
            mq = self.mq_name,
        ));
        format!("{seen}msg qnum: {}\n", queue_messages(self.msg_id))
    }
}

impl Drop for HostIpc {
    fn drop(&mut self) {
        let _ = Command::new("ipcrm")
            .args(["-m", &self.shm_id.to_string(), "-q", &self.msg_id.to_string()])
            .status();
        let _ = Command::new("python3")
            .args(["-c", &format!("{IPC_PRELUDE}\nrt.mq_unlink({:?}.encode())\n", self.mq_name)])
            .status();
    }
}

/// The key `ipcs` shows for the object `id` (`-M…`: a segment, `-Q`: a queue).
fn key_of(flag: &str, id: i32) -> Option<String> {
    let kind = if flag.starts_with("-M") { "-m" } else { "-q" };
    let out = Command::new("ipcs").arg(kind).output().expect("ipcs");
    String::from_utf8_lossy(&out.stdout).lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        (fields.get(1) == Some(&id.to_string().as_str())).then(|| fields[0].to_owned())
    })
}

/// How many messages wait in the host's SysV queue `id` (`qnum=` of `ipcs -q -i`).
fn queue_messages(id: i32) -> String {
    let out = Command::new("ipcs").args(["-q", "-i", &id.to_string()]).output().expect("ipcs -q -i");
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace()
        .find_map(|field| field.strip_prefix("qnum=").map(str::to_owned))
        .unwrap_or_else(|| panic!("ipcs -q -i {id} shows no qnum: {text}"))
}

/// The host's SysV objects (`ipcs -m` and `ipcs -q`, key and id of each).
fn host_objects() -> Vec<String> {
    let mut objects = Vec::new();
    for kind in ["-m", "-q"] {
        let out = Command::new("ipcs").arg(kind).output().expect("ipcs");
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() > 2 && fields[0].starts_with("0x") {
                objects.push(format!("{kind} {} {}", fields[0], fields[1]));
            }
        }
    }
    objects
}

fn attack_ipc(world: &World) -> Result<(), Skip> {
    for tool in ["python3", "ipcs"] {
        world.require(tool)?;
    }
    let ipc = HostIpc::create();
    let before_objects = host_objects();
    let before = ipc.state();
    let made_inside = host::unique("dsh-inside-mq");
    let host_ipc = host_namespace("ipc");
    let outcomes = through_every_door(world, true, |door| {
        format!(
            r#"[ "$(readlink /proc/self/ns/ipc)" = '{host_ipc}' ] && echo "ipc namespace: host's" || echo 'ipc namespace: own'
ipcs -m | grep -qi -- ' {shm_key} ' && echo 'ipcs -m: SEES' || echo 'ipcs -m: blind'
ipcs -q | grep -qi -- '{msg_key} ' && echo 'ipcs -q: SEES' || echo 'ipcs -q: blind'
python3 - <<'PY'
{IPC_PRELUDE}
addr = libc.shmat({shm_id}, None, 0)
if addr in (None, ctypes.c_void_p(-1).value):
    print("shmat:", "refused", err())
else:
    ctypes.memmove(addr, b"PWNED!!!", 8)
    print("shmat:", "DONE")
buf = ctypes.create_string_buffer(b"\x01\x00\x00\x00\x00\x00\x00\x00hello", 13)
print("msgsnd:", "DONE" if libc.msgsnd({msg_id}, buf, 5, 0o4000) == 0 else "refused " + err())
fd = rt.mq_open(b"{mq_name}", os.O_WRONLY | os.O_NONBLOCK, 0, None)
print("mq_open:", "DONE" if fd >= 0 and rt.mq_send(fd, b"hi", 2, 0) == 0 else "refused " + err())
# Objects made inside must not be left in the host's namespace.
shm = libc.shmget(0, 4096, 0o1000 | 0o600)
print("shmget:", "made" if shm >= 0 else "failed " + err())
msq = libc.msgget(0, 0o1000 | 0o600)
print("msgget:", "made" if msq >= 0 else "failed " + err())
mq = rt.mq_open(b"/{made_inside}-{door}", os.O_CREAT | os.O_RDWR, 0o600, None)
print("mq_open create:", "made" if mq >= 0 else "failed " + err())
PY"#,
            shm_key = ipc.shm_key,
            msg_key = ipc.msg_key,
            shm_id = ipc.shm_id,
            msg_id = ipc.msg_id,
            mq_name = ipc.mq_name,
        )
    });
    let after = ipc.state();
    let after_objects = host_objects();
    let leaked: Vec<&String> = after_objects.iter().filter(|o| !before_objects.contains(o)).collect();
    for leak in &leaked {
        let mut parts = leak.split(' ');
        let (kind, id) = (parts.next().unwrap_or_default(), parts.nth(1).unwrap_or_default());
        let _ = Command::new("ipcrm").args([kind, id]).status();
    }
    let leaked_queues: Vec<String> = outcomes
        .iter()
        .map(|(door, _)| {
            let door = match door.as_str() {
                "call read-only --network deny" => "ro",
                other => other,
            };
            format!("/{made_inside}-{door}")
        })
        .filter(|name| {
            let probe = format!(
                "{IPC_PRELUDE}\nfd = rt.mq_open({name:?}.encode(), os.O_RDONLY, 0, None)\nprint(fd >= 0)\nif fd >= 0: rt.mq_unlink({name:?}.encode())\n"
            );
            host_python(&probe).trim() == "True"
        })
        .collect();
    assert_eq!(after, before, "a confined command changed the host's IPC objects: {outcomes:#?}");
    assert!(
        leaked.is_empty(),
        "a confined command left SysV objects in the host's namespace (removed): {leaked:?}"
    );
    assert!(
        leaked_queues.is_empty(),
        "a confined command left message queues on the host (removed): {leaked_queues:?}"
    );
    let expected: Vec<(String, String)> = [
        ("ipc namespace", "own"),
        ("ipcs -m", "blind"),
        ("ipcs -q", "blind"),
        ("shmat", "refused"),
        ("msgsnd", "refused"),
        ("mq_open", "refused"),
        ("shmget", "made"),
        ("msgget", "made"),
        // Landlock refuses to make a file on the message queue filesystem, which no rule
        // grants; under bubblewrap the queue is made in the command's own namespace.
        ("mq_open create", if world.cell.runner == Runner::Landlock { "failed" } else { "made" }),
    ]
    .iter()
    .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
    .collect();
    for (door, out) in &outcomes {
        assert_eq!(verdicts(out.ok()), expected, "through {door}: {out:#?}");
    }
    Ok(())
}

#[test]
fn world_cannot_reach_the_hosts_ipc_objects_or_leave_any() {
    over_matrix("world_cannot_reach_the_hosts_ipc_objects_or_leave_any", attack_ipc);
}

/// The `security.capability` value `setcap cap_setuid+ep` writes (version 2, no root id).
const FILE_CAPABILITY: &str =
    r"b'\x00\x00\x00\x02\x80\x00\x00\x00\x80\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00'";

/// Each way to leave a setuid, setgid or capable copy of bash in the workspace, as
/// `(name, shell line)`; `F` is the copy's path.
const SET_ID_ATTEMPTS: [(&str, &str); 9] = [
    ("chmod 4755", "chmod 4755 \"$F\""),
    ("chmod u+s", "chmod u+s \"$F\""),
    ("chmod 2755", "chmod 2755 \"$F\""),
    ("install -m 4755", "rm -f \"$F\" && install -m 4755 /bin/bash \"$F\""),
    (
        "open O_CREAT 04755",
        "rm -f \"$F\" && python3 -c 'import os, sys; os.close(os.open(sys.argv[1], os.O_CREAT | os.O_WRONLY, 0o4755))' \"$F\"",
    ),
    (
        "mknod 04755",
        "rm -f \"$F\" && python3 -c 'import os, stat, sys; os.mknod(sys.argv[1], stat.S_IFREG | 0o4755)' \"$F\"",
    ),
    (
        "chmod via fchmodat2",
        "python3 -c 'import ctypes, sys; libc = ctypes.CDLL(None, use_errno=True); r = libc.syscall(452, -100, sys.argv[1].encode(), 0o6755, 0); sys.exit(0 if r == 0 else 1)' \"$F\"",
    ),
    ("setcap", "setcap cap_setuid+ep \"$F\""),
    (
        "setxattr security.capability",
        "python3 -c \"import os, sys; os.setxattr(sys.argv[1], 'security.capability', CAP)\" \"$F\"",
    ),
];

fn attack_set_id(world: &World) -> Result<(), Skip> {
    for tool in ["python3", "setcap", "install"] {
        world.require(tool)?;
    }
    let outcomes = through_every_door(world, false, |door| {
        let mut script = String::from("set -u\n");
        for (i, (name, line)) in SET_ID_ATTEMPTS.iter().enumerate() {
            let line = line.replace("CAP", FILE_CAPABILITY);
            script.push_str(&format!(
                "F=\"$PWD/{door}-{i}\"; cp /bin/bash \"$F\"\nif ( {line} ) 2>/dev/null; then echo '{name}: DONE'; else echo '{name}: refused'; fi\n"
            ));
        }
        script
    });
    // What the host sees, whatever the commands said: no set-id bit, no file capability.
    let mut marked = Vec::new();
    let mut copies: Vec<PathBuf> = Vec::new();
    for (door, _) in &outcomes {
        for i in 0..SET_ID_ATTEMPTS.len() {
            let path = world.ws.join(format!("{door}-{i}"));
            let Ok(meta) = std::fs::metadata(&path) else { continue };
            let mode = meta.permissions().mode();
            if mode & 0o6000 != 0 {
                marked.push(format!("{} has mode {mode:o}", path.display()));
            }
            if has_file_capability(&path) {
                marked.push(format!("{} has a security.capability", path.display()));
            }
            copies.push(path);
        }
    }
    // Whatever came out, running a copy as another user gives it no one else's uid.
    let (nobody_uid, nobody_gid) = host::nobody_ids().ok_or_else(|| Skip("no nobody user".into()))?;
    for copy in &copies {
        if std::fs::metadata(copy).is_ok_and(|m| m.permissions().mode() & 0o111 != 0) {
            let out = Command::new(copy)
                .args(["-p", "-c", "echo $EUID"])
                .uid(nobody_uid)
                .gid(nobody_gid)
                .output()
                .expect("run the copy as nobody");
            let euid = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            if !euid.is_empty() && euid != nobody_uid.to_string() {
                marked.push(format!("{} runs as euid {euid} for nobody", copy.display()));
            }
        }
    }
    assert!(marked.is_empty(), "a confined command left set-id or capable files: {marked:#?}\n{outcomes:#?}");
    assert!(copies.len() >= SET_ID_ATTEMPTS.len(), "the copies were made: {copies:?} {outcomes:#?}");
    let expected: Vec<(String, String)> =
        SET_ID_ATTEMPTS.iter().map(|(name, _)| ((*name).to_owned(), "refused".to_owned())).collect();
    for (door, out) in &outcomes {
        assert_eq!(verdicts(out.ok()), expected, "through {door}: {out:#?}");
    }
    // Everyday permission changes still work.
    let out = world.bash("cp /bin/bash plain && chmod 0700 plain && chmod a+rx plain && stat -c %a plain");
    assert_eq!(out.ok(), "755\n", "ordinary chmod must work: {out:#?}");
    Ok(())
}

/// Whether `path` carries a `security.capability` extended attribute (read on the host).
fn has_file_capability(path: &Path) -> bool {
    let c_path = CString::new(path.as_os_str().as_encoded_bytes()).expect("path without NUL");
    // SAFETY: NUL-terminated strings; a null buffer of size 0 asks for the value's size only.
    let size =
        unsafe { libc::getxattr(c_path.as_ptr(), c"security.capability".as_ptr(), std::ptr::null_mut(), 0) };
    size >= 0
}

#[test]
fn world_cannot_leave_a_setuid_setgid_or_capable_file() {
    over_matrix("world_cannot_leave_a_setuid_setgid_or_capable_file", attack_set_id);
}
