//! Everyday work still works in the command's world under workspace-write: version control,
//! a Python virtualenv with a package install, a Rust build, node, make, asyncio over a Unix
//! socket, a multiprocessing pool, and a tmux server of its own.

use super::cell::{User, World};
use super::matrix::{Skip, over_matrix};

fn git_init_add_commit(world: &World) -> Result<(), Skip> {
    world.require("git")?;
    let out = world.bash(
        "git init -q && echo hi > a && git add a && git -c user.name=t -c user.email=t@e commit -qm first && git log --format=%s",
    );
    assert_eq!(out.ok(), "first\n", "{out:#?}");
    assert!(world.ws.join(".git/HEAD").is_file());
    Ok(())
}

#[test]
fn everyday_git_init_add_commit() {
    over_matrix("everyday_git_init_add_commit", git_init_add_commit);
}

/// Writes a one-module wheel by hand (no build backend: installing offline needs none).
const MAKE_WHEEL: &str = r#"python3 - <<'PY'
import base64, hashlib, zipfile
files = {
    "dshworld/__init__.py": "VALUE = 42\n",
    "dshworld-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: dshworld\nVersion: 0.1\n",
    "dshworld-0.1.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: dsh-world\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
def digest(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
record = "".join(f"{name},{digest(text.encode())},{len(text.encode())}\n" for name, text in files.items())
with zipfile.ZipFile("dshworld-0.1-py3-none-any.whl", "w") as wheel:
    for name, text in files.items():
        wheel.writestr(name, text)
    wheel.writestr("dshworld-0.1.dist-info/RECORD", record + "dshworld-0.1.dist-info/RECORD,,\n")
PY"#;

fn python_venv_pip_install(world: &World) -> Result<(), Skip> {
    world.require("python3")?;
    let out = world.bash(&format!(
        "python3 -m venv .venv && {MAKE_WHEEL}
.venv/bin/pip install --no-index -q ./dshworld-0.1-py3-none-any.whl && .venv/bin/python -c 'import dshworld; print(dshworld.VALUE)'"
    ));
    assert_eq!(out.ok(), "42\n", "{out:#?}");
    Ok(())
}

#[test]
fn everyday_python_venv_and_pip_install_of_a_local_wheel() {
    over_matrix("everyday_python_venv_and_pip_install_of_a_local_wheel", python_venv_pip_install);
}

fn cargo_build_offline(world: &World) -> Result<(), Skip> {
    if world.cell.user == User::Nobody {
        return Err(Skip("the Rust toolchain running this test is root's; nobody has none".into()));
    }
    world.require("cargo")?;
    world.write(
        "tiny/Cargo.toml",
        "[package]\nname = \"tiny\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n",
    );
    world.write("tiny/src/main.rs", "fn main() {\n    println!(\"tiny ok\");\n}\n");
    // The crate builds into its own target/ (a target dir the test runner set is not its).
    let out = world
        .bash("unset CARGO_TARGET_DIR CARGO_BUILD_TARGET_DIR; cd tiny && cargo build --offline -q && ./target/debug/tiny");
    assert_eq!(out.ok(), "tiny ok\n", "{out:#?}");
    Ok(())
}

#[test]
fn everyday_cargo_build_offline() {
    over_matrix("everyday_cargo_build_offline", cargo_build_offline);
}

fn node_writes_a_file(world: &World) -> Result<(), Skip> {
    world.require("node")?;
    let out = world.bash(r#"node -e 'require("fs").writeFileSync("from-node.txt", "written by node")'"#);
    out.ok();
    assert_eq!(
        std::fs::read_to_string(world.ws.join("from-node.txt")).ok().as_deref(),
        Some("written by node")
    );
    Ok(())
}

#[test]
fn everyday_node_writes_a_file() {
    over_matrix("everyday_node_writes_a_file", node_writes_a_file);
}

fn make_with_jobs(world: &World) -> Result<(), Skip> {
    world.require("make")?;
    world.write(
        "Makefile",
        "all: a.out b.out\n\t@cat a.out b.out\na.out:\n\t@echo a > $@\nb.out:\n\t@echo b > $@\n",
    );
    let out = world.bash("make -j2");
    assert_eq!(out.ok(), "a\nb\n", "{out:#?}");
    Ok(())
}

#[test]
fn everyday_make_with_parallel_jobs() {
    over_matrix("everyday_make_with_parallel_jobs", make_with_jobs);
}

const ASYNCIO: &str = r#"import asyncio, os

async def main():
    path = os.path.abspath("aio.sock")

    async def upper(reader, writer):
        writer.write((await reader.readline()).upper())
        await writer.drain()
        writer.close()

    server = await asyncio.start_unix_server(upper, path)
    reader, writer = await asyncio.open_unix_connection(path)
    writer.write(b"ping\n")
    await writer.drain()
    reply = (await reader.readline()).decode().strip()
    writer.close()
    server.close()
    await server.wait_closed()
    child = await asyncio.create_subprocess_exec("echo", "child", stdout=asyncio.subprocess.PIPE)
    out, _ = await child.communicate()
    print(reply, out.decode().strip(), child.returncode)

asyncio.run(main())
"#;

fn python_asyncio(world: &World) -> Result<(), Skip> {
    world.require("python3")?;
    world.write("aio.py", ASYNCIO);
    let out = world.bash("python3 aio.py");
    assert_eq!(out.ok(), "PING child 0\n", "{out:#?}");
    Ok(())
}

#[test]
fn everyday_python_asyncio_unix_socket_and_subprocess() {
    over_matrix("everyday_python_asyncio_unix_socket_and_subprocess", python_asyncio);
}

const POOL: &str = r#"import multiprocessing

def square(x):
    return x * x

if __name__ == "__main__":
    with multiprocessing.Pool(2) as pool:
        print(pool.map(square, [1, 2, 3]))
"#;

fn python_multiprocessing(world: &World) -> Result<(), Skip> {
    world.require("python3")?;
    world.write("pool.py", POOL);
    let out = world.bash("python3 pool.py");
    assert_eq!(out.ok(), "[1, 4, 9]\n", "{out:#?}");
    Ok(())
}

#[test]
fn everyday_python_multiprocessing_pool() {
    over_matrix("everyday_python_multiprocessing_pool", python_multiprocessing);
}

fn tmux_of_its_own(world: &World) -> Result<(), Skip> {
    world.require("tmux")?;
    // tmux runs a session's command with $SHELL, else the user's login shell, which is
    // nologin for `nobody`: name the shell rather than inherit the test runner's.
    let out = world.bash(
        "export SHELL=/bin/sh; tmux -S ./sock new-session -d 'sleep 5' && tmux -S ./sock ls && tmux -S ./sock kill-server",
    );
    assert!(out.ok().starts_with("0: 1 windows"), "{out:#?}");
    Ok(())
}

#[test]
fn everyday_tmux_server_inside_the_workspace() {
    over_matrix("everyday_tmux_server_inside_the_workspace", tmux_of_its_own);
}
