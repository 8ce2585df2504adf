//! Plugins stay pending until their injected services exist, apply when the last arrives,
//! and go back to pending when a service they inject unloads.

use std::sync::Arc;

use dsh_core::plugins::{AgentsPlugin, SystemPromptPlugin, ToolsPlugin};
use dsh_core::services::SystemPrompt;
use dsh_core::{
    ConfigError, Context, Handles, Plugin, PluginError, PluginScope, SYSTEM_PROMPT, Service, ServiceKey,
    TOOLS,
};
use parking_lot::Mutex;
use schemars::JsonSchema;
use serde::Deserialize;

static LOG: Mutex<Vec<String>> = Mutex::new(Vec::new());

const WIDGET: ServiceKey<Arc<String>> = Widget::KEY;

struct Widget;
impl Service for Widget {
    const NAME: &'static str = "widget";
    type Handle = Arc<String>;
}

struct WidgetProvider;
#[derive(Clone, Default, Deserialize, JsonSchema)]
struct NoConfig {}

impl Plugin for WidgetProvider {
    const NAME: &'static str = "@test/widget";
    const SHORT_NAME: &'static str = "widget";
    type Deps = ();
    type Config = NoConfig;
    type Validated = NoConfig;
    fn validate(config: NoConfig) -> Result<NoConfig, ConfigError> {
        Ok(config)
    }
    fn apply(scope: &mut PluginScope, (): (), _: &NoConfig) -> Result<(), PluginError> {
        scope.provide(WIDGET, Arc::new("w".to_owned()))
    }
}

struct Consumer;
impl Plugin for Consumer {
    const NAME: &'static str = "@test/consumer";
    const SHORT_NAME: &'static str = "consumer";
    type Deps = (Widget, SystemPrompt);
    type Config = NoConfig;
    type Validated = NoConfig;
    fn validate(config: NoConfig) -> Result<NoConfig, ConfigError> {
        Ok(config)
    }
    fn apply(
        scope: &mut PluginScope,
        (_widget, prompt): Handles<Self>,
        _: &NoConfig,
    ) -> Result<(), PluginError> {
        LOG.lock().push("apply".into());
        let section = prompt.register_section("test:consumer", 150.0, "hello")?;
        scope.add(section);
        scope.on_dispose(|| LOG.lock().push("dispose-1".into()));
        scope.on_dispose(|| LOG.lock().push("dispose-2".into()));
        Ok(())
    }
}

#[tokio::test]
async fn pending_applied_disposed_pending() {
    let ctx = Context::new();
    ctx.load_default::<ToolsPlugin>().expect("tools");
    ctx.load_default::<SystemPromptPlugin>().expect("prompt");
    ctx.load_default::<AgentsPlugin>().expect("agents");
    ctx.load_default::<Consumer>().expect("consumer loads pending");
    let status = ctx.plugins().into_iter().find(|p| p.short_name == "consumer").expect("row");
    assert!(!status.applied);
    assert_eq!(status.missing, vec!["widget".to_owned()]);
    assert!(LOG.lock().is_empty());

    ctx.load_default::<WidgetProvider>().expect("widget");
    assert_eq!(*LOG.lock(), vec!["apply".to_owned()]);
    let prompt = ctx.get(SYSTEM_PROMPT).expect("prompt");
    assert!(prompt.sections().iter().any(|s| s.name == "test:consumer"));

    ctx.unload("widget").await.expect("unload");
    assert_eq!(*LOG.lock(), vec!["apply", "dispose-2", "dispose-1"]);
    assert!(!prompt.sections().iter().any(|s| s.name == "test:consumer"));
    let status = ctx.plugins().into_iter().find(|p| p.short_name == "consumer").expect("row");
    assert!(!status.applied, "back to pending");

    ctx.load_default::<WidgetProvider>().expect("widget again");
    assert_eq!(LOG.lock().last().map(String::as_str), Some("apply"));
    assert!(ctx.get(TOOLS).is_some());
    ctx.dispose().await;
    assert!(ctx.get(TOOLS).is_none());
}

#[tokio::test]
async fn second_provider_fails_loudly() {
    let ctx = Context::new();
    ctx.load_default::<ToolsPlugin>().expect("tools");
    let err = ctx.provide(TOOLS, dsh_core::ToolRegistry::new(ctx.downgrade())).expect_err("duplicate");
    assert_eq!(
        err.to_string(),
        "service \"tools\" is already provided by plugin \"tools\"; plugin \"<host>\" cannot provide it too"
    );
}
