//! The composition plan: which plugins load, in which order, with which config.
//!
//! Sources, later winning: the default plugin set or the file's `plugins` list; the file's
//! per-plugin tables; the command-line switches (`--sandbox`, `--no-background`, `--persist`,
//! `--workspace-root`, `--approve`, `--approval-policy`; `--add-dir` and `--deny-read` add to
//! the file's `writableRoots` and `denyRead`, `--redact-env` to `[subprocess] redactValues`).
//!
//! A config that does not fit a plugin (unknown key, wrong type) is reported as
//! `<file>: [<plugin>] <key>: <what>` (the file as given to `--config`; without a file, or
//! when the key cannot be told, those parts are left out).

use std::any::Any;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context as _, bail};
use dsh_core::{PluginError, PluginFactory};
use serde_json::{Map, Value};

use crate::catalog::{self, Catalog};
use crate::cli::CompositionArgs;
use crate::config::{self, CompositionFile};

/// One plugin of the plan with its (still unparsed) config.
pub struct Row {
    /// The plugin.
    pub factory: Arc<dyn PluginFactory>,
    /// Its config as the file and options give it.
    pub config: Value,
}

/// One plugin ready to load: its config parsed and validated.
pub struct ParsedRow {
    /// The plugin.
    pub factory: Arc<dyn PluginFactory>,
    /// Its validated config, as the factory made it.
    pub config: Arc<dyn Any + Send + Sync>,
}

/// The plugin rows of a composition.
pub struct Plan {
    /// The plugins in load order.
    pub rows: Vec<Row>,
    /// The composition file the tables came from, as given on the command line.
    pub file: Option<PathBuf>,
}

impl Plan {
    /// Builds the plan from the command line (reading `--config` when given). `host` names
    /// plugins the running subcommand needs; they join the plan when it lacks them.
    pub fn from_args(catalog: &Catalog, args: &CompositionArgs, host: &[&str]) -> anyhow::Result<Self> {
        match &args.config {
            Some(path) => Self::build(catalog, &config::read(path)?, args, host)
                .map(|plan| Plan { file: Some(path.clone()), ..plan })
                .with_context(|| format!("config {}", path.display())),
            None => Self::build(catalog, &CompositionFile::default(), args, host),
        }
    }

    /// Builds the plan from a parsed file and the command-line switches.
    pub fn build(
        catalog: &Catalog,
        file: &CompositionFile,
        args: &CompositionArgs,
        host: &[&str],
    ) -> anyhow::Result<Self> {
        let names: Vec<String> = match &file.plugins {
            Some(names) => names.clone(),
            None => catalog::DEFAULT_COMPOSITION.iter().map(|n| (*n).to_owned()).collect(),
        };
        let mut plan = Plan { rows: Vec::new(), file: None };
        for name in &names {
            let factory = lookup(catalog, name)?;
            if plan.index(factory.short_name()).is_some() {
                bail!("plugin \"{}\" is listed twice", factory.short_name());
            }
            plan.rows.push(Row { factory, config: Value::Null });
        }
        if let Some(mode) = &args.sandbox {
            plan.swap_in_sandbox(catalog, mode)?;
        }
        let replacing = args.executor.as_deref();
        if let Some(kind) = &args.executor {
            plan.select_executor(catalog, kind, args.sandbox.is_some())?;
        }
        if args.approve.is_some() || args.approval_policy.is_some() || args.askpass_answer_file.is_some() {
            plan.ensure(catalog, "approval")?;
        }
        // `--askpass`, or an `[askpass]` table: the askpass service, after the sandbox
        // provider (which it shares its directory with), and the approval service it asks.
        let askpass_table = file
            .tables
            .iter()
            .any(|(name, _)| catalog.find(name).is_some_and(|f| f.short_name() == "askpass"));
        if args.askpass || askpass_table {
            if let Some(kind) = args.executor.as_deref().filter(|kind| *kind != "local") {
                bail!(
                    "--askpass answers programs on this host; with --executor {kind} commands run elsewhere, where its program and socket are not"
                );
            }
            plan.ensure(catalog, "approval")?;
            plan.ensure(catalog, "askpass")?;
        }
        for name in host {
            plan.ensure(catalog, name)?;
        }
        let replacement = match (args.sandbox.is_some(), replacing) {
            (true, _) => Some(catalog::SANDBOX_EXECUTOR),
            (false, Some("container")) => Some(catalog::CONTAINER_EXECUTOR),
            (false, Some("ssh")) => Some(catalog::SSH_EXECUTOR),
            (false, _) => None,
        };
        plan.apply_tables(catalog, file, replacement)?;
        plan.apply_switches(args)?;
        // This host keeps the crash-safe job journal unless the file says otherwise.
        plan.set_default("jobs", "journal", Value::Bool(true))?;
        plan.deny_moved_session_logs()?;
        Ok(plan)
    }

    /// The local sandbox provider denies reads of `<DSH_HOME>/sessions`, the session logs'
    /// default home; when `session-jsonl` keeps them elsewhere (its `root` or `dshHome`), that
    /// directory joins `denyRead` too.
    fn deny_moved_session_logs(&mut self) -> anyhow::Result<()> {
        let Some(config) = self.index("session-jsonl").map(|i| &self.rows[i].config) else { return Ok(()) };
        let text = |key: &str| config.get(key).and_then(Value::as_str).map(str::to_owned);
        let dir = match (text("root"), text("dshHome")) {
            (Some(root), _) => dsh_core::home::absolutize(Path::new(&root)),
            (None, Some(home)) => dsh_core::home::resolve_dsh_home(Some(&home), None).join("sessions"),
            (None, None) => return Ok(()),
        };
        self.append_paths(catalog::SANDBOX_PROVIDER, "denyRead", &[dir], "[session-jsonl]")
    }

    fn index(&self, short_name: &str) -> Option<usize> {
        self.rows.iter().position(|r| r.factory.short_name() == short_name)
    }

    fn ensure(&mut self, catalog: &Catalog, short_name: &str) -> anyhow::Result<()> {
        if self.index(short_name).is_none() {
            self.rows.push(Row { factory: lookup(catalog, short_name)?, config: Value::Null });
        }
        Ok(())
    }

    /// `--sandbox`: the sandboxing executor takes the local executor's place, and its
    /// provider and policy service join.
    fn swap_in_sandbox(&mut self, catalog: &Catalog, mode: &str) -> anyhow::Result<()> {
        let Some(executor) = catalog.find(catalog::SANDBOX_EXECUTOR) else {
            bail!(
                "--sandbox {mode} needs the sandboxing executor \"{}\", which is not part of this build",
                catalog::SANDBOX_EXECUTOR
            );
        };
        match (self.index(catalog::LOCAL_EXECUTOR), self.index(catalog::SANDBOX_EXECUTOR)) {
            (Some(local), None) => self.rows[local] = Row { factory: executor, config: Value::Null },
            (Some(local), Some(_)) => {
                self.rows.remove(local);
            }
            (None, _) => self.ensure(catalog, catalog::SANDBOX_EXECUTOR)?,
        }
        for name in catalog::SANDBOX_PLUGINS {
            self.ensure(catalog, name)?;
        }
        Ok(())
    }

    /// Puts `executor` (the plugin named `name`) where the local executor was, in its place in
    /// the load order; drops the local one when `executor` is already loaded.
    fn swap_executor(
        &mut self,
        catalog: &Catalog,
        executor: Arc<dyn PluginFactory>,
        name: &str,
    ) -> anyhow::Result<()> {
        match (self.index(catalog::LOCAL_EXECUTOR), self.index(name)) {
            (Some(local), None) => self.rows[local] = Row { factory: executor, config: Value::Null },
            (Some(local), Some(_)) => {
                self.rows.remove(local);
            }
            (None, _) => self.ensure(catalog, name)?,
        }
        Ok(())
    }

    /// `--executor`: `container` swaps the container executor in for the local one (it
    /// does not combine with `--sandbox`: the container is the confinement), `ssh` the SSH
    /// executor (nor does it: the host is not confined from here); `local` keeps the plan as
    /// it is.
    fn select_executor(&mut self, catalog: &Catalog, kind: &str, sandboxed: bool) -> anyhow::Result<()> {
        match kind {
            "local" => Ok(()),
            "container" if sandboxed => {
                bail!(
                    "--executor container does not combine with --sandbox: the container is the confinement"
                )
            }
            "container" => {
                let Some(executor) = catalog.find(catalog::CONTAINER_EXECUTOR) else {
                    bail!(
                        "--executor container needs the plugin \"{}\", which is not part of this build",
                        catalog::CONTAINER_EXECUTOR
                    );
                };
                self.swap_executor(catalog, executor, catalog::CONTAINER_EXECUTOR)
            }
            "ssh" if sandboxed => {
                bail!(
                    "--executor ssh runs commands on another host, where --sandbox cannot confine them: use one or the other"
                )
            }
            "ssh" => {
                let executor = lookup(catalog, catalog::SSH_EXECUTOR)?;
                self.swap_executor(catalog, executor, catalog::SSH_EXECUTOR)
            }
            other => bail!("--executor {other} is not part of this build (available: local, container, ssh)"),
        }
    }

    fn apply_tables(
        &mut self,
        catalog: &Catalog,
        file: &CompositionFile,
        replacement: Option<&'static str>,
    ) -> anyhow::Result<()> {
        let mut seen: Vec<&'static str> = Vec::new();
        // Under --sandbox or --executor container, settings written for the local executor
        // configure its replacement (same keys), unless the file configures the replacement
        // itself.
        let replacement_has_own_table = file
            .tables
            .iter()
            .any(|(name, _)| catalog.find(name).is_some_and(|f| Some(f.short_name()) == replacement));
        for (name, value) in &file.tables {
            let factory = lookup(catalog, name)?;
            let mut short = factory.short_name();
            if seen.contains(&short) {
                bail!("plugin \"{short}\" is configured twice");
            }
            seen.push(short);
            if let Some(replacement) = replacement.filter(|_| short == catalog::LOCAL_EXECUTOR)
                && !replacement_has_own_table
            {
                short = replacement;
            }
            let Some(i) = self.index(short) else {
                bail!("[{name}] configures plugin \"{short}\", which is not in the composition");
            };
            self.rows[i].config = value.clone();
        }
        Ok(())
    }

    fn apply_switches(&mut self, args: &CompositionArgs) -> anyhow::Result<()> {
        if args.no_background {
            self.set("tool-bash", "enableRunInBackground", Value::Bool(false))?;
        }
        if args.interactive {
            self.set("tool-jobs", "input", Value::Bool(true))?;
            self.set("tool-bash", "tty", Value::Bool(true))?;
        }
        if let Some(persist) = &args.persist {
            self.set("tool-bash", "persist", Value::String(persist.clone()))?;
        }
        if let Some(root) = &args.workspace_root {
            if self.index(catalog::SSH_EXECUTOR).is_some() {
                bail!(
                    "--workspace-root names a directory on this host; with --executor ssh commands run on the host: give its directory with --ssh-cwd"
                );
            }
            let root = workspace_root(root)?;
            for executor in [catalog::LOCAL_EXECUTOR, catalog::SANDBOX_EXECUTOR, catalog::CONTAINER_EXECUTOR]
            {
                self.set(executor, "cwd", Value::String(root.clone()))?;
            }
            self.set("approval", "workspaceRoot", Value::String(root.clone()))?;
            self.set("sandbox-policy", "workspaceRoot", Value::String(root))?;
        }
        if let Some(mode) = &args.sandbox {
            self.set("sandbox-policy", "mode", Value::String(mode.clone()))?;
        }
        self.apply_ssh_switches(args)?;
        if let Some(policy) = &args.approval_policy {
            self.set("approval", "policy", Value::String(policy.clone()))?;
        }
        let absolute =
            |paths: &[PathBuf]| paths.iter().map(|p| dsh_core::home::absolutize(p)).collect::<Vec<_>>();
        self.append_paths("sandbox-policy", "writableRoots", &absolute(&args.add_dir), "--add-dir")?;
        self.append_paths(catalog::SANDBOX_PROVIDER, "denyRead", &absolute(&args.deny_read), "--deny-read")?;
        self.append_names("subprocess", "redactValues", &args.redact_env)?;
        self.apply_container_switches(args)?;
        let network = args.network.as_ref().filter(|n| *n != "allow");
        let container =
            self.index(catalog::CONTAINER_EXECUTOR).is_some() && self.index("sandbox-policy").is_none();
        if container && (args.network.as_deref() == Some("ask") || !args.allow_host.is_empty()) {
            bail!(
                "the container executor takes --network allow or deny (no network at all); --network ask and --allow-host need --sandbox"
            );
        }
        if container && let Some(network) = &args.network {
            self.set(catalog::CONTAINER_EXECUTOR, "network", Value::String(network.clone()))?;
            return self.refuse_persist_elsewhere();
        }
        if (network.is_some() || !args.allow_host.is_empty()) && self.index("sandbox-policy").is_none() {
            bail!(
                "--network and --allow-host confine commands' network access: they need a sandbox (add --sandbox workspace-write or --sandbox read-only)"
            );
        }
        if let Some(network) = &args.network {
            self.set("sandbox-policy", "network", Value::String(network.clone()))?;
        }
        self.append_names("sandbox-policy", "allowHosts", &args.allow_host)?;
        self.apply_credentials(args)?;
        self.refuse_persist_elsewhere()
    }

    /// `--credential` and `--credential-upstream-ca` join the file's `credentials`; the file
    /// each binding reads its value from, if any, is hidden from confined commands.
    fn apply_credentials(&mut self, args: &CompositionArgs) -> anyhow::Result<()> {
        let flags = !args.credential.is_empty() || args.credential_upstream_ca.is_some();
        if flags && self.index("sandbox-policy").is_none() {
            bail!(
                "--credential binds secrets to hosts at the proxy of confined commands: it needs a sandbox and --network deny or ask"
            );
        }
        let mut bindings = Vec::with_capacity(args.credential.len());
        for flag in &args.credential {
            bindings.push(parse_credential_flag(flag)?);
        }
        if !bindings.is_empty() {
            let Some(i) = self.index("sandbox-policy") else { return Ok(()) };
            let config = &mut self.rows[i].config;
            if config.is_null() {
                *config = Value::Object(Map::new());
            }
            let Some(object) = config.as_object_mut() else { bail!("[sandbox-policy] must be a table") };
            let list = object.entry("credentials").or_insert_with(|| Value::Array(Vec::new()));
            let Some(list) = list.as_array_mut() else {
                bail!("[sandbox-policy] credentials must be an array of tables");
            };
            list.extend(bindings);
        }
        if let Some(file) = &args.credential_upstream_ca {
            let Some(text) = dsh_core::home::absolutize(file).to_str().map(str::to_owned) else {
                bail!("--credential-upstream-ca {}: not valid UTF-8", file.display());
            };
            self.set("sandbox-policy", "credentialsUpstreamCa", Value::String(text))?;
        }
        let files: Vec<PathBuf> = self
            .index("sandbox-policy")
            .and_then(|i| self.rows[i].config.get("credentials"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|b| b.get("file").and_then(Value::as_str))
            .map(|f| dsh_core::home::absolutize(Path::new(f)))
            .collect();
        self.mask_paths(&files)
    }

    /// `persist` (`--persist` or `[tool-bash] persist`) keeps the shell's state in a file on
    /// this host, handed to each command as a descriptor: it cannot follow commands that run
    /// in a container or on an SSH host, so it is refused at start rather than on every call.
    fn refuse_persist_elsewhere(&self) -> anyhow::Result<()> {
        let persist = self.index("tool-bash").and_then(|i| self.rows[i].config.get("persist"));
        if persist.is_none_or(|p| p.as_str() == Some("none")) {
            return Ok(());
        }
        for (executor, kind) in [(catalog::CONTAINER_EXECUTOR, "container"), (catalog::SSH_EXECUTOR, "ssh")] {
            if self.index(executor).is_some() {
                bail!(
                    "--persist keeps the shell's state in a file on this host; with --executor {kind} commands run elsewhere, where it cannot follow them: drop --persist (or [tool-bash] persist)"
                );
            }
        }
        Ok(())
    }

    /// `--ssh-host`, `--ssh-identity`, `--ssh-known-hosts`: the SSH executor's connection;
    /// without it in the plan they are refused.
    fn apply_ssh_switches(&mut self, args: &CompositionArgs) -> anyhow::Result<()> {
        let given = args.ssh_host.is_some() || args.ssh_identity.is_some() || args.ssh_known_hosts.is_some();
        if given && self.index(catalog::SSH_EXECUTOR).is_none() {
            bail!(
                "--ssh-host, --ssh-identity and --ssh-known-hosts configure the SSH executor: add --executor ssh"
            );
        }
        if let Some(host) = &args.ssh_host {
            self.set(catalog::SSH_EXECUTOR, "host", Value::String(host.clone()))?;
        }
        if let Some(cwd) = &args.ssh_cwd {
            if self.index(catalog::SSH_EXECUTOR).is_none() {
                bail!("--ssh-cwd configures the SSH executor: add --executor ssh");
            }
            let Some(text) = cwd.to_str().filter(|_| cwd.is_absolute()) else {
                bail!("--ssh-cwd {}: not an absolute UTF-8 path (a directory on the host)", cwd.display());
            };
            self.set(catalog::SSH_EXECUTOR, "cwd", Value::String(text.to_owned()))?;
        }
        for (option, key, path) in [
            ("--ssh-identity", "identity", &args.ssh_identity),
            ("--ssh-known-hosts", "knownHosts", &args.ssh_known_hosts),
        ] {
            let Some(path) = path else { continue };
            let path = dsh_core::home::absolutize(path);
            let Some(text) = path.to_str() else {
                bail!("{option} {}: not valid UTF-8", path.display());
            };
            self.set(catalog::SSH_EXECUTOR, key, Value::String(text.to_owned()))?;
        }
        Ok(())
    }

    /// `--image`, `--container`, `--memory`, `--cpus`, `--pids-limit`, `--container-warm`: the container
    /// executor's keys; without it in the plan they are refused.
    fn apply_container_switches(&mut self, args: &CompositionArgs) -> anyhow::Result<()> {
        let values = [
            ("--image", "image", args.image.clone().map(Value::String)),
            ("--container", "container", args.container.clone().map(Value::String)),
            ("--memory", "memory", args.memory.clone().map(Value::String)),
            ("--cpus", "cpus", args.cpus.and_then(serde_json::Number::from_f64).map(Value::Number)),
            ("--pids-limit", "pidsLimit", args.pids_limit.map(Value::from)),
            ("--container-warm", "warm", args.container_warm.map(Value::from)),
        ];
        for (option, key, value) in values {
            let Some(value) = value else { continue };
            if self.index(catalog::CONTAINER_EXECUTOR).is_none() {
                bail!("{option} configures the container executor: add --executor container");
            }
            self.set(catalog::CONTAINER_EXECUTOR, key, value)?;
        }
        Ok(())
    }

    /// Appends `names` to the array `key` of a plugin's config, after the file's own; a
    /// plugin not in the plan is left alone.
    fn append_names(&mut self, short_name: &str, key: &str, names: &[String]) -> anyhow::Result<()> {
        let Some(i) = self.index(short_name).filter(|_| !names.is_empty()) else { return Ok(()) };
        let config = &mut self.rows[i].config;
        if config.is_null() {
            *config = Value::Object(Map::new());
        }
        let Some(object) = config.as_object_mut() else {
            bail!("[{short_name}] must be a table");
        };
        let list = object.entry(key).or_insert_with(|| Value::Array(Vec::new()));
        let Some(list) = list.as_array_mut() else {
            bail!("[{short_name}] {key} must be an array of names");
        };
        list.extend(names.iter().cloned().map(Value::String));
        Ok(())
    }

    /// Adds `paths` to the local sandbox provider's `maskedPaths`, after the file's own, so
    /// confined commands cannot read them. Without the provider in the plan there is nothing
    /// to add to (unconfined commands can read whatever the harness's user can).
    pub fn mask_paths(&mut self, paths: &[PathBuf]) -> anyhow::Result<()> {
        if let Some(path) = paths.iter().find(|p| p.to_str().is_none()) {
            bail!("cannot hide {} from confined commands: not valid UTF-8", path.display());
        }
        self.append_paths(catalog::SANDBOX_PROVIDER, "maskedPaths", paths, "maskedPaths")
    }

    /// Appends `paths` to the array `key` of a plugin's config, after the file's own; a
    /// plugin not in the plan is left alone. `source` names the paths in errors.
    fn append_paths(
        &mut self,
        short_name: &str,
        key: &str,
        paths: &[PathBuf],
        source: &str,
    ) -> anyhow::Result<()> {
        let Some(i) = self.index(short_name).filter(|_| !paths.is_empty()) else {
            return Ok(());
        };
        let config = &mut self.rows[i].config;
        if config.is_null() {
            *config = Value::Object(Map::new());
        }
        let Some(object) = config.as_object_mut() else {
            bail!("[{short_name}] must be a table");
        };
        let list = object.entry(key).or_insert_with(|| Value::Array(Vec::new()));
        let Some(list) = list.as_array_mut() else {
            bail!("[{short_name}] {key} must be an array of paths");
        };
        for path in paths {
            let Some(text) = path.to_str() else {
                bail!("{source} {}: not valid UTF-8", path.display());
            };
            list.push(Value::String(text.to_owned()));
        }
        Ok(())
    }

    /// Sets one config key of a plugin in the plan unless its table sets it already; a plugin
    /// not in the plan is left alone.
    fn set_default(&mut self, short_name: &str, key: &str, value: Value) -> anyhow::Result<()> {
        let Some(i) = self.index(short_name) else { return Ok(()) };
        if self.rows[i].config.get(key).is_some() {
            return Ok(());
        }
        self.set(short_name, key, value)
    }

    /// Sets one config key of a plugin in the plan; a plugin not in the plan is left alone.
    fn set(&mut self, short_name: &str, key: &str, value: Value) -> anyhow::Result<()> {
        let Some(i) = self.index(short_name) else { return Ok(()) };
        let config = &mut self.rows[i].config;
        if config.is_null() {
            *config = Value::Object(Map::new());
        }
        let Some(object) = config.as_object_mut() else {
            bail!("[{short_name}] must be a table");
        };
        object.insert(key.to_owned(), value);
        Ok(())
    }

    /// Parses every config (so a bad value is reported before anything starts).
    ///
    /// A config of the wrong shape names the file, the plugin and, when it can be told, the
    /// key: `dsh.toml: [bash-local] graceMs: invalid type: string "soon", expected a number`.
    /// A value the plugin refuses keeps the plugin's own exact message.
    pub fn parse(self) -> anyhow::Result<Vec<ParsedRow>> {
        let file = self.file;
        self.rows
            .into_iter()
            .map(|row| match row.factory.parse_config(row.config.clone()) {
                Ok(config) => Ok(ParsedRow { factory: row.factory, config }),
                Err(PluginError::InvalidConfig { plugin, message }) => {
                    let key = offending_key(&row, &message).map(|k| format!("{k}: ")).unwrap_or_default();
                    let what = format!("[{plugin}] {key}{message}");
                    Err(match &file {
                        Some(file) => anyhow::anyhow!("{}: {what}", file.display()),
                        None => anyhow::anyhow!(what),
                    })
                }
                Err(e) => Err(e.into()),
            })
            .collect()
    }

    /// Short names in load order.
    #[cfg(test)]
    pub fn names(&self) -> Vec<&'static str> {
        self.rows.iter().map(|r| r.factory.short_name()).collect()
    }
}

/// The key of `row`'s table whose value alone is refused with `message`, if exactly one is.
/// Unknown-field messages already name their key.
fn offending_key(row: &Row, message: &str) -> Option<String> {
    if message.starts_with("unknown field") {
        return None;
    }
    let table = row.config.as_object()?;
    let mut culprits = table.iter().filter(|(key, value)| {
        let alone = Value::Object(Map::from_iter([((*key).clone(), (*value).clone())]));
        matches!(
            row.factory.parse_config(alone),
            Err(PluginError::InvalidConfig { message: m, .. }) if m == message
        )
    });
    let (key, _) = culprits.next()?;
    culprits.next().is_none().then(|| key.clone())
}

fn lookup(catalog: &Catalog, name: &str) -> anyhow::Result<Arc<dyn PluginFactory>> {
    catalog
        .find(name)
        .ok_or_else(|| anyhow::anyhow!("unknown plugin \"{name}\" (known: {})", catalog.short_names()))
}

/// `--workspace-root` as an absolute existing directory.
fn workspace_root(root: &Path) -> anyhow::Result<String> {
    let absolute = dsh_core::home::absolutize(root);
    if !absolute.is_dir() {
        bail!("--workspace-root {}: not a directory", root.display());
    }
    absolute
        .to_str()
        .map(str::to_owned)
        .ok_or_else(|| anyhow::anyhow!("--workspace-root {}: not valid UTF-8", root.display()))
}

/// One `--credential NAME=HOST,HOST[;header=NAME][;file=PATH]` as a `credentials` entry.
fn parse_credential_flag(flag: &str) -> anyhow::Result<Value> {
    let mut parts = flag.split(';');
    let binding = parts.next().unwrap_or_default();
    let Some((name, hosts)) = binding.split_once('=') else {
        bail!(
            "--credential {flag:?}: expected NAME=HOST[,HOST...] (the value comes from $NAME or ;file=PATH, never the command line)"
        );
    };
    let hosts: Vec<Value> = hosts
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(|h| Value::String(h.to_owned()))
        .collect();
    let mut entry = Map::new();
    entry.insert("name".into(), Value::String(name.trim().to_owned()));
    entry.insert("hosts".into(), Value::Array(hosts));
    let mut headers = Vec::new();
    for option in parts {
        match option.split_once('=') {
            Some(("header", header)) => headers.push(Value::String(header.trim().to_owned())),
            Some(("file", file)) => {
                let Some(path) = dsh_core::home::absolutize(Path::new(file)).to_str().map(str::to_owned)
                else {
                    bail!("--credential {name}: the file is not valid UTF-8");
                };
                entry.insert("file".into(), Value::String(path));
            }
            _ => bail!("--credential {name}: unknown option {option:?} (expected header=NAME or file=PATH)"),
        }
    }
    if !headers.is_empty() {
        entry.insert("headers".into(), Value::Array(headers));
    }
    Ok(Value::Object(entry))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Approve;
    use serde_json::json;

    fn build(file: &str, args: CompositionArgs) -> anyhow::Result<Plan> {
        Plan::build(&Catalog::builtin(), &config::parse(file).expect("toml"), &args, &[])
    }

    #[test]
    fn default_plan_is_the_default_composition() {
        let plan = build("", CompositionArgs::default()).expect("plan");
        assert_eq!(plan.names(), catalog::DEFAULT_COMPOSITION);
        // Only the job journal is switched on by this host.
        let jobs = plan.rows.iter().find(|r| r.factory.short_name() == "jobs").expect("jobs");
        assert_eq!(jobs.config, json!({"journal": true}));
        assert!(plan.rows.iter().filter(|r| r.factory.short_name() != "jobs").all(|r| r.config.is_null()));
        let off = build(
            "[jobs]
journal = false
",
            CompositionArgs::default(),
        )
        .expect("plan");
        let jobs = off.rows.iter().find(|r| r.factory.short_name() == "jobs").expect("jobs");
        assert_eq!(jobs.config, json!({"journal": false}), "the file's own choice stands");
    }

    #[test]
    fn plugin_list_accepts_package_and_short_names() {
        let plan = build("plugins = [\"@deepseek-ai/dsh-tools\", \"agent\"]", CompositionArgs::default())
            .expect("plan");
        assert_eq!(plan.names(), ["tools", "agent"]);
    }

    #[test]
    fn unknown_and_duplicate_plugins_are_refused() {
        let err =
            build("plugins = [\"tools\", \"nope\"]", CompositionArgs::default()).err().expect("refused");
        assert!(err.to_string().starts_with("unknown plugin \"nope\" (known: tools, "), "{err}");
        let err = build("plugins = [\"tools\", \"@deepseek-ai/dsh-tools\"]", CompositionArgs::default())
            .err()
            .expect("refused");
        assert_eq!(err.to_string(), "plugin \"tools\" is listed twice");
        let err = build("[nope]\nx = 1", CompositionArgs::default()).err().expect("refused");
        assert!(err.to_string().starts_with("unknown plugin \"nope\""), "{err}");
        let err =
            build("plugins = [\"tools\"]\n[agent]\n", CompositionArgs::default()).err().expect("refused");
        assert_eq!(err.to_string(), "[agent] configures plugin \"agent\", which is not in the composition");
    }

    #[test]
    fn tables_set_configs_and_switches_win() {
        let args = CompositionArgs {
            approve: Some(Approve::Rejected),
            approval_policy: Some("never".into()),
            ..Default::default()
        };
        let plan =
            build("[system-prompt]\npersona = \"p\"\n[approval]\npolicy = \"ask\"\n", args).expect("plan");
        let config_of =
            |name: &str| plan.rows.iter().find(|r| r.factory.short_name() == name).map(|r| &r.config);
        assert_eq!(config_of("system-prompt"), Some(&json!({"persona": "p"})));
        assert_eq!(config_of("approval"), Some(&json!({"policy": "never"})));
    }

    #[test]
    fn host_plugins_join_before_tables_apply() {
        let plan = Plan::build(
            &Catalog::builtin(),
            &config::parse("[approval]\npolicy = \"never\"\n").expect("toml"),
            &CompositionArgs::default(),
            &["approval"],
        )
        .expect("plan");
        assert_eq!(
            plan.rows.last().map(|r| (r.factory.short_name(), r.config.clone())),
            Some(("approval", json!({"policy": "never"})))
        );
    }

    #[test]
    fn sandbox_swaps_the_executor_in_place() {
        let args = CompositionArgs { sandbox: Some("workspace-write".into()), ..Default::default() };
        let plan = build("[bash-local]\ngraceMs = 200\n", args).expect("plan");
        let names = plan.names();
        let local = catalog::DEFAULT_COMPOSITION.iter().position(|n| *n == "bash-local").expect("default");
        assert_eq!(names[local], "bash-sandbox");
        assert!(!names.contains(&"bash-local"));
        assert_eq!(&names[names.len() - 2..], ["sandbox-local", "sandbox-policy"]);
        let config_of =
            |name: &str| plan.rows.iter().find(|r| r.factory.short_name() == name).map(|r| &r.config);
        assert_eq!(config_of("bash-sandbox"), Some(&json!({"graceMs": 200})));
        assert_eq!(config_of("sandbox-policy"), Some(&json!({"mode": "workspace-write"})));
    }

    #[test]
    fn executor_ssh_swaps_the_executor_in_place_with_its_connection() {
        let args = CompositionArgs {
            executor: Some("ssh".into()),
            ssh_host: Some("me@box:2222".into()),
            ssh_identity: Some(PathBuf::from("/keys/id")),
            ssh_known_hosts: Some(PathBuf::from("/keys/known")),
            ..Default::default()
        };
        let plan = build(
            "[bash-local]
graceMs = 200
",
            args,
        )
        .expect("plan");
        let names = plan.names();
        let local = catalog::DEFAULT_COMPOSITION.iter().position(|n| *n == "bash-local").expect("default");
        assert_eq!(names[local], "shell-ssh");
        assert!(!names.contains(&"bash-local"));
        assert_eq!(names.len(), catalog::DEFAULT_COMPOSITION.len());
        let config = plan.rows[local].config.clone();
        assert_eq!(
            config,
            json!({"graceMs": 200, "host": "me@box:2222", "identity": "/keys/id", "knownHosts": "/keys/known"})
        );
        assert!(plan.parse().is_ok(), "shell-ssh takes the keys");
        let local_only = CompositionArgs { executor: Some("local".into()), ..Default::default() };
        assert_eq!(build("", local_only).expect("plan").names(), catalog::DEFAULT_COMPOSITION);
    }

    #[test]
    fn credential_flags_join_the_files_credentials_and_hide_their_files() {
        let args = CompositionArgs {
            sandbox: Some("workspace-write".into()),
            network: Some("deny".into()),
            credential: vec!["GH=api.github.com,github.com;header=X-Api-Key;file=/srv/gh-token".into()],
            credential_upstream_ca: Some(PathBuf::from("/etc/ca.pem")),
            ..Default::default()
        };
        let file = "[[sandbox-policy.credentials]]\nname = \"NPM\"\nhosts = [\"registry.npmjs.org\"]\nfile = \"/srv/npm\"\n";
        let plan = build(file, args).expect("plan");
        let config_of =
            |name: &str| plan.rows.iter().find(|r| r.factory.short_name() == name).map(|r| r.config.clone());
        let policy = config_of("sandbox-policy").expect("sandbox-policy");
        assert_eq!(
            policy["credentials"],
            json!([
                {"name": "NPM", "hosts": ["registry.npmjs.org"], "file": "/srv/npm"},
                {"name": "GH", "hosts": ["api.github.com", "github.com"], "file": "/srv/gh-token", "headers": ["X-Api-Key"]}
            ])
        );
        assert_eq!(policy["credentialsUpstreamCa"], json!("/etc/ca.pem"));
        let masked = config_of("sandbox-local").expect("sandbox-local")["maskedPaths"].clone();
        assert_eq!(masked, json!(["/srv/npm", "/srv/gh-token"]));
        let bad = CompositionArgs {
            sandbox: Some("workspace-write".into()),
            credential: vec!["GH=api.github.com;color=blue".into()],
            ..Default::default()
        };
        assert!(build("", bad).err().expect("refused").to_string().contains("unknown option \"color=blue\""));
        let no_hosts = CompositionArgs {
            sandbox: Some("workspace-write".into()),
            credential: vec!["GH".into()],
            ..Default::default()
        };
        assert!(build("", no_hosts).err().expect("refused").to_string().contains("expected NAME=HOST"));
        let unconfined = CompositionArgs { credential: vec!["GH=github.com".into()], ..Default::default() };
        assert!(build("", unconfined).err().expect("refused").to_string().contains("needs a sandbox"));
    }

    #[test]
    fn host_masked_paths_join_the_files_own() {
        let args = CompositionArgs { sandbox: Some("workspace-write".into()), ..Default::default() };
        let mut plan = build("[sandbox-local]\nmaskedPaths = [\"/etc/mine\"]\n", args.clone()).expect("plan");
        plan.mask_paths(&[PathBuf::from("/srv/token")]).expect("masked");
        let config_of = |plan: &Plan, name: &str| {
            plan.rows.iter().find(|r| r.factory.short_name() == name).map(|r| r.config.clone())
        };
        assert_eq!(
            config_of(&plan, "sandbox-local"),
            Some(json!({"maskedPaths": ["/etc/mine", "/srv/token"]}))
        );
        let mut plan = build("", args).expect("plan");
        plan.mask_paths(&[PathBuf::from("/srv/token")]).expect("masked");
        assert_eq!(config_of(&plan, "sandbox-local"), Some(json!({"maskedPaths": ["/srv/token"]})));
        let mut unconfined = build("", CompositionArgs::default()).expect("plan");
        unconfined.mask_paths(&[PathBuf::from("/srv/token")]).expect("nothing to mask with");
        assert!(
            unconfined.rows.iter().filter(|r| r.factory.short_name() != "jobs").all(|r| r.config.is_null())
        );
    }

    #[test]
    fn add_dir_and_deny_read_join_the_files_own() {
        let args = CompositionArgs {
            sandbox: Some("workspace-write".into()),
            add_dir: vec![PathBuf::from("/cache/npm"), PathBuf::from("rel")],
            deny_read: vec![PathBuf::from("/srv/keys")],
            ..Default::default()
        };
        let plan = build(
            "[sandbox-policy]\nwritableRoots = [\"/other\"]\n[sandbox-local]\ndenyRead = [\"~/.vault\"]\n",
            args.clone(),
        )
        .expect("plan");
        let config_of = |plan: &Plan, name: &str| {
            plan.rows.iter().find(|r| r.factory.short_name() == name).map(|r| r.config.clone())
        };
        let rel = dsh_core::home::absolutize(Path::new("rel")).to_str().expect("utf-8").to_owned();
        assert_eq!(
            config_of(&plan, "sandbox-policy"),
            Some(json!({"writableRoots": ["/other", "/cache/npm", rel], "mode": "workspace-write"}))
        );
        assert_eq!(config_of(&plan, "sandbox-local"), Some(json!({"denyRead": ["~/.vault", "/srv/keys"]})));
        let unconfined = build("", CompositionArgs { sandbox: None, ..args.clone() }).expect("plan");
        assert!(
            unconfined.rows.iter().filter(|r| r.factory.short_name() != "jobs").all(|r| r.config.is_null()),
            "nothing to add to without a sandbox"
        );
        let moved = build("[session-jsonl]\nroot = \"/logs\"\n", args.clone()).expect("plan");
        assert_eq!(config_of(&moved, "sandbox-local"), Some(json!({"denyRead": ["/srv/keys", "/logs"]})));
        let home = build("[session-jsonl]\ndshHome = \"/h\"\n", args).expect("plan");
        assert_eq!(
            config_of(&home, "sandbox-local"),
            Some(json!({"denyRead": ["/srv/keys", "/h/sessions"]}))
        );
    }

    #[test]
    fn redact_env_joins_the_files_redact_values() {
        let args =
            CompositionArgs { redact_env: vec!["MY_VAR".into(), "OTHER".into()], ..Default::default() };
        let plan = build("[subprocess]\nredactValues = [\"FROM_FILE\"]\n", args.clone()).expect("plan");
        let config_of = |plan: &Plan| {
            plan.rows.iter().find(|r| r.factory.short_name() == "subprocess").map(|r| r.config.clone())
        };
        assert_eq!(config_of(&plan), Some(json!({"redactValues": ["FROM_FILE", "MY_VAR", "OTHER"]})));
        let plan = build("", args).expect("plan");
        assert_eq!(config_of(&plan), Some(json!({"redactValues": ["MY_VAR", "OTHER"]})));
        assert!(plan.parse().is_ok(), "the subprocess plugin takes the key");
    }

    #[test]
    fn bad_config_values_fail_at_parse() {
        let err = build("[system-prompt]\npersona = 3\n", CompositionArgs::default())
            .expect("plan")
            .parse()
            .err()
            .expect("refused");
        assert_eq!(err.to_string(), "[system-prompt] persona: invalid type: integer `3`, expected a string");
        let err = build("[system-prompt]\npersonae = \"x\"\n", CompositionArgs::default())
            .expect("plan")
            .parse()
            .err()
            .expect("refused");
        assert!(err.to_string().starts_with("[system-prompt] unknown field `personae`"), "{err}");
        let mut plan = build("[bash-local]\ngraceMs = \"soon\"\n", CompositionArgs::default()).expect("plan");
        plan.file = Some(PathBuf::from("conf/dsh.toml"));
        let err = plan.parse().err().expect("refused");
        assert_eq!(
            err.to_string(),
            "conf/dsh.toml: [bash-local] graceMs: invalid type: string \"soon\", expected a number"
        );
        let err = build("[bash-local]\ngraceMs = 0\n", CompositionArgs::default())
            .expect("plan")
            .parse()
            .err()
            .expect("refused");
        assert_eq!(err.to_string(), "bash-local: graceMs must be a positive finite number");
    }
}
