//! The plugin lifecycle through the public API, with small test plugins: pending until the
//! dependencies exist, applied, disposed in reverse; a dependant goes back to pending when a
//! dependency leaves and applies again when it returns; a second provider of a service is
//! refused; configs get their defaults, unknown keys and refused values are reported; a failed
//! `apply` leaves nothing behind.
//!
//! Each test logs under its own tag (tests share the process), see [`log`].

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use dsh_core::{
    ConfigError, Context, Factory, Handles, Plugin, PluginError, PluginFactory, PluginScope, PluginStatus,
    Service, ServiceKey,
};
use parking_lot::Mutex;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

static LOGS: LazyLock<Mutex<HashMap<String, Vec<String>>>> = LazyLock::new(Mutex::default);

fn record(tag: &str, line: impl Into<String>) {
    LOGS.lock().entry(tag.to_owned()).or_default().push(line.into());
}

/// Everything recorded under `tag`, and forgets it.
fn log(tag: &str) -> Vec<String> {
    LOGS.lock().remove(tag).unwrap_or_default()
}

/// The config of every test plugin: the tag its lifecycle is logged under.
#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Tag {
    tag: String,
}

fn tag(tag: &str) -> Tag {
    Tag { tag: tag.to_owned() }
}

/// `base`: a string.
struct BaseService;
impl Service for BaseService {
    const NAME: &'static str = "base";
    type Handle = Arc<String>;
}
const BASE: ServiceKey<Arc<String>> = BaseService::KEY;

/// `mid`: a string built on `base`.
struct MidService;
impl Service for MidService {
    const NAME: &'static str = "mid";
    type Handle = Arc<String>;
}
const MID: ServiceKey<Arc<String>> = MidService::KEY;

/// Provides `base`; no dependencies.
struct Base;
impl Plugin for Base {
    const NAME: &'static str = "@test/base";
    const SHORT_NAME: &'static str = "base";
    type Deps = ();
    type Config = Tag;
    type Validated = String;
    fn validate(config: Tag) -> Result<String, ConfigError> {
        Ok(config.tag)
    }
    fn apply(scope: &mut PluginScope, (): (), tag: &String) -> Result<(), PluginError> {
        record(tag, "base:apply");
        scope.provide(BASE, Arc::new("b".to_owned()))?;
        let tag = tag.clone();
        scope.on_dispose(move || record(&tag, "base:dispose"));
        Ok(())
    }
}

/// Needs `base`; provides `mid`.
struct Mid;
impl Plugin for Mid {
    const NAME: &'static str = "@test/mid";
    const SHORT_NAME: &'static str = "mid";
    type Deps = (BaseService,);
    type Config = Tag;
    type Validated = String;
    fn validate(config: Tag) -> Result<String, ConfigError> {
        Ok(config.tag)
    }
    fn apply(scope: &mut PluginScope, (base,): Handles<Self>, tag: &String) -> Result<(), PluginError> {
        record(tag, format!("mid:apply({base})"));
        scope.provide(MID, Arc::new(format!("{base}+m")))?;
        let tag = tag.clone();
        scope.on_dispose(move || record(&tag, "mid:dispose"));
        Ok(())
    }
}

/// Needs `base` and `mid`; registers two effects.
struct Top;
impl Plugin for Top {
    const NAME: &'static str = "@test/top";
    const SHORT_NAME: &'static str = "top";
    type Deps = (BaseService, MidService);
    type Config = Tag;
    type Validated = String;
    fn validate(config: Tag) -> Result<String, ConfigError> {
        Ok(config.tag)
    }
    fn apply(scope: &mut PluginScope, (base, mid): Handles<Self>, tag: &String) -> Result<(), PluginError> {
        record(tag, format!("top:apply({base},{mid})"));
        let (first, second) = (tag.clone(), tag.clone());
        scope.on_dispose(move || record(&first, "top:dispose-1"));
        scope.on_dispose(move || record(&second, "top:dispose-2"));
        Ok(())
    }
}

/// No dependencies, provides nothing: an independent plugin.
struct Loner;
impl Plugin for Loner {
    const NAME: &'static str = "@test/loner";
    const SHORT_NAME: &'static str = "loner";
    type Deps = ();
    type Config = Tag;
    type Validated = String;
    fn validate(config: Tag) -> Result<String, ConfigError> {
        Ok(config.tag)
    }
    fn apply(scope: &mut PluginScope, (): (), tag: &String) -> Result<(), PluginError> {
        record(tag, "loner:apply");
        let tag = tag.clone();
        scope.on_dispose(move || record(&tag, "loner:dispose"));
        Ok(())
    }
}

/// Provides `base` too.
struct Rival;
impl Plugin for Rival {
    const NAME: &'static str = "@test/rival";
    const SHORT_NAME: &'static str = "rival";
    type Deps = ();
    type Config = Tag;
    type Validated = String;
    fn validate(config: Tag) -> Result<String, ConfigError> {
        Ok(config.tag)
    }
    fn apply(scope: &mut PluginScope, (): (), tag: &String) -> Result<(), PluginError> {
        let undo = tag.clone();
        scope.on_dispose(move || record(&undo, "rival:undo"));
        scope.provide(BASE, Arc::new("r".to_owned()))
    }
}

fn status(ctx: &Context, short_name: &str) -> Option<PluginStatus> {
    ctx.plugins().into_iter().find(|p| p.short_name == short_name)
}

fn applied(ctx: &Context) -> Vec<(&'static str, bool)> {
    ctx.plugins().into_iter().map(|p| (p.short_name, p.applied)).collect()
}

#[tokio::test]
async fn a_plugin_is_pending_until_its_dependencies_exist_then_applied_then_disposed() {
    let t = "pending-applied-disposed";
    let ctx = Context::new();
    ctx.load::<Top>(tag(t)).expect("top loads pending");
    ctx.load::<Mid>(tag(t)).expect("mid loads pending");
    let top = status(&ctx, "top").expect("top row");
    assert_eq!((top.name, top.applied, top.missing), ("@test/top", false, vec!["base".into(), "mid".into()]));
    let mid = status(&ctx, "mid").expect("mid row");
    assert_eq!((mid.applied, mid.missing), (false, vec!["base".to_owned()]));
    assert_eq!(log(t), Vec::<String>::new(), "nothing applies while a dependency is missing");
    assert!(ctx.get(MID).is_none());

    ctx.load::<Base>(tag(t)).expect("base");
    assert_eq!(
        log(t),
        ["base:apply", "mid:apply(b)", "top:apply(b,b+m)"],
        "each applies once its last dependency appears"
    );
    assert_eq!(applied(&ctx), [("top", true), ("mid", true), ("base", true)]);
    assert!(ctx.plugins().iter().all(|p| p.missing.is_empty()));
    assert_eq!(ctx.get(MID).as_deref().map(String::as_str), Some("b+m"));

    ctx.dispose().await;
    assert_eq!(log(t), ["top:dispose-2", "top:dispose-1", "mid:dispose", "base:dispose"]);
    assert!(ctx.plugins().is_empty());
    assert!(!ctx.has("base") && !ctx.has("mid"));
}

#[tokio::test]
async fn a_dependant_goes_back_to_pending_when_its_dependency_unloads_and_applies_again_when_it_returns() {
    let t = "dependant-returns";
    let ctx = Context::new();
    ctx.load::<Base>(tag(t)).expect("base");
    ctx.load::<Mid>(tag(t)).expect("mid");
    ctx.load::<Top>(tag(t)).expect("top");
    assert_eq!(log(t), ["base:apply", "mid:apply(b)", "top:apply(b,b+m)"]);

    ctx.unload("mid").await.expect("unload mid");
    assert_eq!(log(t), ["top:dispose-2", "top:dispose-1", "mid:dispose"], "the dependant is disposed first");
    assert_eq!(applied(&ctx), [("base", true), ("top", false)], "mid is gone, top waits");
    assert_eq!(status(&ctx, "top").expect("top").missing, ["mid"]);
    assert!(ctx.get(MID).is_none());
    assert!(ctx.get(BASE).is_some(), "what the unloaded plugin needed stays");

    ctx.load::<Mid>(tag(t)).expect("mid again");
    assert_eq!(log(t), ["mid:apply(b)", "top:apply(b,b+m)"]);
    assert_eq!(applied(&ctx), [("base", true), ("top", true), ("mid", true)]);

    // Unloading the root takes the whole chain back to pending, dependants first.
    ctx.unload("@test/base").await.expect("unload by package name");
    assert_eq!(log(t), ["top:dispose-2", "top:dispose-1", "mid:dispose", "base:dispose"]);
    assert_eq!(applied(&ctx), [("top", false), ("mid", false)]);
    ctx.load::<Base>(tag(t)).expect("base again");
    assert_eq!(log(t), ["base:apply", "mid:apply(b)", "top:apply(b,b+m)"]);
    ctx.dispose().await;
}

#[tokio::test]
async fn a_withdrawn_host_service_sends_its_dependants_back_to_pending() {
    let t = "withdrawn";
    let ctx = Context::new();
    ctx.load::<Mid>(tag(t)).expect("mid");
    ctx.provide(BASE, Arc::new("host".to_owned())).expect("host provides base");
    assert_eq!(log(t), ["mid:apply(host)"]);
    ctx.withdraw("base").await;
    assert_eq!(log(t), ["mid:dispose"]);
    assert_eq!(status(&ctx, "mid").expect("mid").missing, ["base"]);
    assert!(ctx.get(MID).is_none());
    ctx.provide(BASE, Arc::new("again".to_owned())).expect("provided again");
    assert_eq!(log(t), ["mid:apply(again)"]);
    ctx.dispose().await;
    assert_eq!(log(t), ["mid:dispose"]);
}

#[tokio::test]
async fn disposal_runs_in_reverse_load_order_and_each_plugins_effects_in_reverse() {
    let t = "reverse";
    let ctx = Context::new();
    ctx.load::<Loner>(tag(t)).expect("loner");
    ctx.load::<Base>(tag(t)).expect("base");
    ctx.load::<Mid>(tag(t)).expect("mid");
    ctx.load::<Top>(tag(t)).expect("top");
    assert_eq!(log(t), ["loner:apply", "base:apply", "mid:apply(b)", "top:apply(b,b+m)"]);
    ctx.dispose().await;
    assert_eq!(log(t), ["top:dispose-2", "top:dispose-1", "mid:dispose", "base:dispose", "loner:dispose"]);
    // Disposed means gone: a second dispose has nothing left to run.
    ctx.dispose().await;
    assert_eq!(log(t), Vec::<String>::new());
}

#[tokio::test]
async fn a_second_provider_of_a_service_is_refused_with_its_exact_message() {
    let t = "duplicate";
    let ctx = Context::new();
    ctx.load::<Base>(tag(t)).expect("base");
    let error = ctx.load::<Rival>(tag(t)).expect_err("a second provider of base");
    assert_eq!(
        error,
        PluginError::DuplicateService { key: "base".into(), provider: "base".into(), plugin: "rival".into() }
    );
    assert_eq!(
        error.to_string(),
        "service \"base\" is already provided by plugin \"base\"; plugin \"rival\" cannot provide it too"
    );
    // The refused apply's own effects are undone (spawned on this runtime: let them run).
    tokio::task::yield_now().await;
    assert_eq!(log(t), ["base:apply", "rival:undo"]);
    assert_eq!(applied(&ctx), [("base", true)], "the refused plugin is not loaded");
    assert_eq!(ctx.get(BASE).as_deref().map(String::as_str), Some("b"), "the first provider keeps it");

    let host = ctx.provide(BASE, Arc::new("h".to_owned())).expect_err("the host cannot provide it either");
    assert_eq!(
        host.to_string(),
        "service \"base\" is already provided by plugin \"base\"; plugin \"<host>\" cannot provide it too"
    );
    ctx.dispose().await;
    assert_eq!(log(t), ["base:dispose"]);

    let ctx = Context::new();
    ctx.provide(BASE, Arc::new("h".to_owned())).expect("host first");
    let error = ctx.load::<Base>(tag(t)).expect_err("then a plugin");
    assert_eq!(
        error.to_string(),
        "service \"base\" is already provided by plugin \"<host>\"; plugin \"base\" cannot provide it too"
    );
}

#[tokio::test]
async fn loading_twice_and_unloading_what_is_not_loaded_are_refused() {
    let t = "twice";
    let ctx = Context::new();
    ctx.load::<Loner>(tag(t)).expect("loner");
    let error = ctx.load::<Loner>(tag(t)).expect_err("already loaded");
    assert_eq!(error.to_string(), "plugin \"loner\" is already loaded");
    let error = ctx.unload("nope").await.expect_err("not loaded");
    assert_eq!(error, PluginError::NotLoaded("nope".into()));
    assert_eq!(error.to_string(), "plugin \"nope\" is not loaded");
    assert_eq!(log(t), ["loner:apply"], "the refused second load applied nothing");
    ctx.dispose().await;
}

/// `apply` fails after providing a service and registering an effect.
struct Faulty;
impl Plugin for Faulty {
    const NAME: &'static str = "@test/faulty";
    const SHORT_NAME: &'static str = "faulty";
    type Deps = ();
    type Config = Tag;
    type Validated = String;
    fn validate(config: Tag) -> Result<String, ConfigError> {
        Ok(config.tag)
    }
    fn apply(scope: &mut PluginScope, (): (), tag: &String) -> Result<(), PluginError> {
        scope.provide(BASE, Arc::new("half".to_owned()))?;
        let undo = tag.clone();
        scope.on_dispose(move || record(&undo, "faulty:undo"));
        Err(PluginError::Apply("faulty: the second step failed".into()))
    }
}

/// Outside a runtime, so the failed plugin's effects run before `load` returns.
#[test]
fn a_failed_apply_is_reported_and_leaves_nothing_behind() {
    let t = "faulty";
    let ctx = Context::new();
    let error = ctx.load::<Faulty>(tag(t)).expect_err("apply fails");
    assert_eq!(error.to_string(), "faulty: the second step failed");
    assert_eq!(log(t), ["faulty:undo"]);
    assert!(ctx.plugins().is_empty(), "the failed plugin is dropped");
    assert!(!ctx.has("base"), "what it provided is withdrawn");
    ctx.load::<Base>(tag(t)).expect("base can be provided now");
    assert_eq!(log(t), ["base:apply"]);
}

/// A plugin with settings: defaults for absent keys, unknown keys refused, and a check.
struct Configured;

#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
struct Settings {
    tag: String,
    limit: u32,
    label_text: String,
}

impl Default for Settings {
    fn default() -> Self {
        Self { tag: String::new(), limit: 7, label_text: "plain".into() }
    }
}

impl Plugin for Configured {
    const NAME: &'static str = "@test/configured";
    const SHORT_NAME: &'static str = "configured";
    type Deps = ();
    type Config = Settings;
    type Validated = Settings;
    fn validate(config: Settings) -> Result<Settings, ConfigError> {
        if config.limit == 0 {
            return Err(ConfigError::new("configured: limit must be at least 1 (got 0)"));
        }
        Ok(config)
    }
    fn apply(_scope: &mut PluginScope, (): (), config: &Settings) -> Result<(), PluginError> {
        record(&config.tag, format!("limit={} label={}", config.limit, config.label_text));
        Ok(())
    }
}

fn parse(config: Value) -> Result<Arc<dyn std::any::Any + Send + Sync>, PluginError> {
    Factory::<Configured>::new().parse_config(config)
}

#[test]
fn config_defaults_fill_absent_keys_and_unknown_keys_or_refused_values_are_reported() {
    let t = "config";
    let factory: Arc<dyn PluginFactory> = Arc::new(Factory::<Configured>::new());
    assert_eq!(
        (factory.name(), factory.short_name(), factory.inject()),
        ("@test/configured", "configured", &[][..])
    );

    // `null` and `{}` are the defaults; a partial config keeps the defaults of the rest.
    for (config, line) in [
        (Value::Null, "limit=7 label=plain"),
        (json!({}), "limit=7 label=plain"),
        (json!({"labelText": "set"}), "limit=7 label=set"),
        (json!({"limit": 3}), "limit=3 label=plain"),
    ] {
        let mut config = config;
        if let Some(object) = config.as_object_mut() {
            object.insert("tag".into(), json!(t));
        }
        let parsed = factory.parse_config(config.clone()).expect("parses");
        let ctx = Context::new();
        // `null` has no tag: the defaults log under the empty tag.
        let logged_under = if config.is_null() { "" } else { t };
        ctx.load_erased(Arc::clone(&factory), parsed).expect("loads");
        assert_eq!(log(logged_under), [line], "{config}");
    }

    let ctx = Context::new();
    ctx.load_default::<Configured>().expect("load_default uses the defaults");
    assert_eq!(log(""), ["limit=7 label=plain"]);

    let unknown = parse(json!({"limitt": 1})).expect_err("unknown key");
    assert_eq!(
        unknown,
        PluginError::InvalidConfig {
            plugin: "configured".into(),
            message: "unknown field `limitt`, expected one of `tag`, `limit`, `labelText`".into()
        }
    );
    assert_eq!(
        unknown.to_string(),
        "configured: unknown field `limitt`, expected one of `tag`, `limit`, `labelText`"
    );
    let wrong = parse(json!({"limit": "many"})).expect_err("wrong type");
    assert_eq!(
        wrong.to_string(),
        "configured: invalid type: string \"many\", expected a non-negative integer"
    );

    let refused = parse(json!({"limit": 0})).expect_err("validation refuses");
    assert_eq!(refused, PluginError::Config("configured: limit must be at least 1 (got 0)".into()));
    let ctx = Context::new();
    let refused =
        ctx.load::<Configured>(Settings { limit: 0, ..Settings::default() }).expect_err("load validates too");
    assert_eq!(refused.to_string(), "configured: limit must be at least 1 (got 0)");
    assert!(ctx.plugins().is_empty(), "a refused config loads nothing");
}
