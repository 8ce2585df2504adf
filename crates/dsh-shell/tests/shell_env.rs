//! The shell-env registry and its plugin: built-ins, contributors and disposal, registration
//! and collection failures, plugin defaults and config, and `DSH_SESSION_JSONL` from real
//! JSONL persistence.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use dsh_core::plugins::SessionJsonlPlugin;
use dsh_core::{
    Agent, Context, JsonlPersistence, Plugin, PluginError, PluginScope, SESSION_PERSISTENCE, SessionLocator,
    SessionPersistence, ToolExec,
};
use dsh_shell::{
    SHELL_ENV, ShellEnvConfig, ShellEnvContributor, ShellEnvError, ShellEnvPlugin, ShellEnvRegistry,
    ShellEnvVariable,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

fn agentless() -> ToolExec {
    ToolExec::new(None, "call-1")
}

fn as_agent(id: &str) -> ToolExec {
    ToolExec::new(Some(Agent::new(id, None)), "call-1")
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

fn abs(rel: &str) -> String {
    dsh_core::home::absolutize(&PathBuf::from(rel)).to_string_lossy().into_owned()
}

#[test]
fn se_01_builtins_and_dsh_home() {
    let registry = ShellEnvRegistry::new(Some("./test-dsh-home"), Some("/ignored"));
    let home = abs("./test-dsh-home");
    assert!(home.starts_with('/') && home.ends_with("/test-dsh-home"), "{home}");
    assert_eq!(registry.collect(&agentless()), Ok(map(&[("DSH_HOME", &home), ("DSH_SHELL", "1")])));
    assert_eq!(
        registry.collect(&as_agent("session-a")),
        Ok(map(&[("DSH_HOME", &home), ("DSH_SESSION_ID", "session-a"), ("DSH_SHELL", "1")]))
    );

    let ambient = ShellEnvRegistry::new(None, Some("./ambient-dsh-home"));
    assert_eq!(ambient.collect(&agentless()).unwrap()["DSH_HOME"], abs("./ambient-dsh-home"));

    let fallback = dsh_core::home::user_home().join(".dsh").to_string_lossy().into_owned();
    for blank in [None, Some(""), Some("   ")] {
        let registry = ShellEnvRegistry::new(None, blank);
        assert_eq!(registry.collect(&agentless()).unwrap()["DSH_HOME"], fallback, "{blank:?}");
    }
}

fn optional_session_fact() -> ShellEnvContributor {
    ShellEnvContributor::new(
        "optional-session-fact",
        &[("DSH_SESSION_OPTIONAL", "The session id, only for agent calls.")],
        |exec| {
            let mut out = BTreeMap::new();
            if let Some(agent) = &exec.agent {
                out.insert("DSH_SESSION_OPTIONAL".to_owned(), json!(agent.id()));
            }
            Ok(out)
        },
    )
}

fn always_available_fact() -> ShellEnvContributor {
    ShellEnvContributor::new("always-available-fact", &[("DSH_ALWAYS_AVAILABLE", "Always yes.")], |_| {
        Ok(BTreeMap::from([("DSH_ALWAYS_AVAILABLE".to_owned(), json!("yes"))]))
    })
}

#[tokio::test]
async fn se_02_contributors_and_disposal() {
    let registry = ShellEnvRegistry::new(Some("/h/dsh"), None);
    let optional = registry.register(optional_session_fact()).expect("register");
    let always = registry.register(always_available_fact()).expect("register");

    let env = registry.collect(&agentless()).unwrap();
    assert_eq!(
        env,
        map(&[("DSH_ALWAYS_AVAILABLE", "yes"), ("DSH_HOME", "/h/dsh"), ("DSH_SHELL", "1")]),
        "agent-less lacks the optional key"
    );
    let env = registry.collect(&as_agent("session-b")).unwrap();
    assert_eq!(env["DSH_SESSION_OPTIONAL"], "session-b");
    assert_eq!(env["DSH_ALWAYS_AVAILABLE"], "yes");

    assert_eq!(
        registry.list(),
        vec![
            ShellEnvVariable {
                contributor: "always-available-fact".into(),
                description: "Always yes.".into(),
                key: "DSH_ALWAYS_AVAILABLE".into()
            },
            ShellEnvVariable {
                contributor: "optional-session-fact".into(),
                description: "The session id, only for agent calls.".into(),
                key: "DSH_SESSION_OPTIONAL".into()
            },
        ]
    );

    optional.dispose().await;
    let env = registry.collect(&as_agent("session-b")).unwrap();
    assert!(!env.contains_key("DSH_SESSION_OPTIONAL"));
    assert_eq!(registry.list().len(), 1);
    // The name is free again; disposing the old handle twice cannot remove a newcomer.
    let _again = registry.register(optional_session_fact()).expect("re-register");
    always.dispose().await;
    assert_eq!(registry.list().iter().map(|v| v.key.as_str()).collect::<Vec<_>>(), ["DSH_SESSION_OPTIONAL"]);
}

/// A plugin that registers a contributor into the scope, so unloading it removes the key.
struct FactPlugin;
#[derive(Clone, Default, Deserialize, JsonSchema)]
struct NoConfig {}
impl Plugin for FactPlugin {
    const NAME: &'static str = "@test/fact";
    const SHORT_NAME: &'static str = "fact";
    type Deps = (dsh_shell::services::ShellEnv,);
    type Config = NoConfig;
    type Validated = NoConfig;
    fn validate(config: NoConfig) -> Result<NoConfig, dsh_core::ConfigError> {
        Ok(config)
    }
    fn apply(
        scope: &mut PluginScope,
        (registry,): dsh_core::Handles<Self>,
        _: &NoConfig,
    ) -> Result<(), PluginError> {
        let disposer = registry.register(always_available_fact()).map_err(PluginError::apply)?;
        scope.add(disposer);
        Ok(())
    }
}

#[tokio::test]
async fn se_02_unloading_the_registering_plugin_removes_its_keys() {
    let ctx = Context::new();
    ctx.load::<ShellEnvPlugin>(ShellEnvConfig { dsh_home: Some("/h/dsh".into()) }).expect("shell-env");
    ctx.load_default::<FactPlugin>().expect("fact");
    let registry = ctx.get(SHELL_ENV).expect("registry");
    assert_eq!(registry.collect(&agentless()).unwrap()["DSH_ALWAYS_AVAILABLE"], "yes");
    ctx.unload("fact").await.expect("unload");
    assert!(!registry.collect(&agentless()).unwrap().contains_key("DSH_ALWAYS_AVAILABLE"));
}

#[test]
fn se_03_registration_failures() {
    let registry = ShellEnvRegistry::new(Some("/h/dsh"), None);
    let nothing = |_: &ToolExec| Ok(BTreeMap::new());
    let err = |c: ShellEnvContributor| registry.register(c).err().map(|e| e.to_string());

    let _first = registry
        .register(ShellEnvContributor::new("first", &[("DSH_SHARED", "shared")], nothing))
        .expect("ok");
    assert_eq!(
        err(ShellEnvContributor::new("second", &[("DSH_SHARED", "shared")], nothing)).as_deref(),
        Some(
            "bash env key \"DSH_SHARED\" is already owned by contributor \"first\"; contributor \"second\" cannot also own it"
        )
    );
    let _declared = registry
        .register(ShellEnvContributor::new("declared", &[("DSH_DECLARED", "d")], nothing))
        .expect("ok");
    assert_eq!(
        err(ShellEnvContributor::new("declared", &[("DSH_OTHER", "d")], nothing)).as_deref(),
        Some("bash env contributor \"declared\" is already registered")
    );
    assert_eq!(
        err(ShellEnvContributor::new(" ", &[], nothing)).as_deref(),
        Some("bash env contributor name must be non-empty")
    );
    assert_eq!(
        err(ShellEnvContributor::new("invalid-key", &[("dsh_invalid", "d")], nothing)).as_deref(),
        Some("bash env contributor \"invalid-key\" declared invalid key \"dsh_invalid\"")
    );
    assert_eq!(
        err(ShellEnvContributor::new("reserved-key", &[("DSH_HOME", "d")], nothing)).as_deref(),
        Some("bash env contributor \"reserved-key\" cannot own reserved key \"DSH_HOME\"")
    );
    for reserved in ["DSH_SHELL", "DSH_SESSION_ID"] {
        assert!(matches!(
            registry.register(ShellEnvContributor::new("r", &[(reserved, "d")], nothing)),
            Err(ShellEnvError::ReservedKey { .. })
        ));
    }
    assert_eq!(
        err(ShellEnvContributor::new("blank-description", &[("DSH_BLANK_DESCRIPTION", " \t")], nothing))
            .as_deref(),
        Some("bash env contributor \"blank-description\" must describe \"DSH_BLANK_DESCRIPTION\"")
    );
    // Failed registrations left nothing behind.
    let keys: Vec<String> = registry.list().into_iter().map(|v| v.key).collect();
    assert_eq!(keys, ["DSH_DECLARED", "DSH_SHARED"]);
}

#[test]
fn collect_failures_are_loud() {
    let registry = ShellEnvRegistry::new(Some("/h/dsh"), None);
    let d = registry
        .register(ShellEnvContributor::new("sneaky", &[("DSH_DECLARED", "d")], |_| {
            Ok(BTreeMap::from([("DSH_UNDECLARED".to_owned(), json!("x"))]))
        }))
        .expect("ok");
    assert_eq!(
        registry.collect(&agentless()).err().map(|e| e.to_string()).as_deref(),
        Some("bash env contributor \"sneaky\" returned undeclared key \"DSH_UNDECLARED\"")
    );
    futures::executor::block_on(d.dispose());

    let d = registry
        .register(ShellEnvContributor::new("numeric", &[("DSH_NUMBER", "d")], |_| {
            Ok(BTreeMap::from([("DSH_NUMBER".to_owned(), json!(7))]))
        }))
        .expect("ok");
    assert_eq!(
        registry.collect(&agentless()).err().map(|e| e.to_string()).as_deref(),
        Some("bash env contributor \"numeric\" returned a non-string value for \"DSH_NUMBER\"")
    );
    futures::executor::block_on(d.dispose());

    let _failing = registry
        .register(ShellEnvContributor::new("failing", &[("DSH_FAILING", "d")], |_| {
            Err("session store offline".to_owned())
        }))
        .expect("ok");
    assert_eq!(
        registry.collect(&agentless()).err().map(|e| e.to_string()).as_deref(),
        Some("session store offline")
    );
}

/// A persistence backend that locates every session as `kind` at `path`.
struct FakePersistence {
    kind: &'static str,
    path: &'static str,
}
impl SessionPersistence for FakePersistence {
    fn locate(&self, _session_id: &str) -> Option<SessionLocator> {
        Some(SessionLocator { kind: self.kind.into(), path: PathBuf::from(self.path) })
    }
    fn attach(&self, _session: &dsh_core::Session) {}
}

fn shell_env_ctx() -> Context {
    let ctx = Context::new();
    ctx.load::<ShellEnvPlugin>(ShellEnvConfig { dsh_home: Some("/h/dsh".into()) }).expect("shell-env");
    ctx
}

#[test]
fn se_05_plugin_defaults() {
    let ctx = shell_env_ctx();
    let registry = ctx.get(SHELL_ENV).expect("registry");
    assert_eq!(
        registry.list(),
        vec![ShellEnvVariable {
            contributor: "session-persistence".into(),
            description:
                "Absolute target path of the current session JSONL when the active persistence backend provides one."
                    .into(),
            key: "DSH_SESSION_JSONL".into(),
        }]
    );
    assert_eq!(
        serde_json::to_value(registry.list()).unwrap(),
        json!([{
            "contributor": "session-persistence",
            "description": "Absolute target path of the current session JSONL when the active persistence backend provides one.",
            "key": "DSH_SESSION_JSONL"
        }])
    );
    // No backend: absent.
    assert!(!registry.collect(&as_agent("s")).unwrap().contains_key("DSH_SESSION_JSONL"));

    let backend: Arc<dyn SessionPersistence> =
        Arc::new(FakePersistence { kind: "jsonl", path: "C:\\sessions\\s.jsonl" });
    ctx.provide(SESSION_PERSISTENCE, backend).expect("backend");
    assert_eq!(registry.collect(&as_agent("s")).unwrap()["DSH_SESSION_JSONL"], "C:\\sessions\\s.jsonl");
    assert!(
        !registry.collect(&agentless()).unwrap().contains_key("DSH_SESSION_JSONL"),
        "agent-less calls have no session file"
    );

    let ctx = shell_env_ctx();
    let backend: Arc<dyn SessionPersistence> =
        Arc::new(FakePersistence { kind: "sqlite", path: "/db/sessions.sqlite" });
    ctx.provide(SESSION_PERSISTENCE, backend).expect("backend");
    let registry = ctx.get(SHELL_ENV).expect("registry");
    assert!(!registry.collect(&as_agent("s")).unwrap().contains_key("DSH_SESSION_JSONL"));
}

#[test]
fn se_05_plugin_config_is_camel_case_and_closed() {
    use dsh_core::{Factory, PluginFactory};
    let factory = Factory::<ShellEnvPlugin>::new();
    assert_eq!((factory.name(), factory.short_name()), ("@deepseek-ai/dsh-shell-env", "shell-env"));
    assert!(factory.parse_config(json!({"dshHome": "/x"})).is_ok());
    assert!(factory.parse_config(Value::Null).is_ok());
    assert!(factory.parse_config(json!({"dsh_home": "/x"})).is_err());
}

#[test]
fn we_07_session_jsonl_from_real_jsonl_persistence() {
    let dir = tempfile::tempdir().expect("tmp");
    let root = dir.path().join("sessions");
    let ctx = shell_env_ctx();
    ctx.load::<SessionJsonlPlugin>(dsh_core::plugins::SessionJsonlConfig {
        root: Some(root.to_string_lossy().into_owned()),
        dsh_home: None,
    })
    .expect("jsonl");
    let registry = ctx.get(SHELL_ENV).expect("registry");
    let env = registry.collect(&as_agent("session-env-id")).unwrap();
    let expected = JsonlPersistence::new(&root).locate("session-env-id").expect("jsonl").path;
    assert_eq!(
        env,
        map(&[
            ("DSH_HOME", "/h/dsh"),
            ("DSH_SESSION_ID", "session-env-id"),
            ("DSH_SESSION_JSONL", &expected.to_string_lossy()),
            ("DSH_SHELL", "1"),
        ])
    );
    assert!(!expected.exists(), "the path need not exist yet");
}
