//! The composition context: named services, plugins that wait for their injected services,
//! and effect-scoped disposal.
//!
//! A service is a type ([`Service`]: its wire name and handle type). A plugin declares the
//! services it needs as a tuple ([`Plugin::Deps`]; its `INJECT` list is derived from it).
//! Loaded while one is missing it stays **pending**; it applies the moment the last one
//! appears, receiving the resolved handles. Everything it registers while
//! applying (services, tools, prompt sections, listeners, contributors) is recorded as an effect
//! and disposed in reverse order when the plugin, or any service it injects, unloads — which
//! puts it back to pending.

use std::any::Any;
use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;
use std::sync::{Arc, Weak};

use futures::future::BoxFuture;
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// A service as a type: the wire name it is provided under and the handle stored there.
///
/// ```ignore
/// pub struct Tools;
/// impl Service for Tools {
///     const NAME: &'static str = "tools";
///     type Handle = Arc<ToolRegistry>;
/// }
/// ```
pub trait Service: 'static {
    /// The wire and log name (`tools`, `shell`, `systemPrompt`).
    const NAME: &'static str;
    /// What consumers receive.
    type Handle: Clone + Send + Sync + 'static;
    /// The value key of this service, for [`Context::get`] and [`PluginScope::provide`].
    const KEY: ServiceKey<Self::Handle> = ServiceKey::new(Self::NAME);
}

/// The hard dependencies of a plugin: `()` or a tuple of [`Service`]s. All must exist before
/// the plugin applies; `apply` receives their handles in the same order.
pub trait Deps: 'static {
    /// The resolved handles (a tuple of [`Service::Handle`]s).
    type Handles: Send + 'static;
    /// The services' names, in order (the plugin's `INJECT`).
    const NAMES: &'static [&'static str];
    /// Fetches every handle, or names the first service that is not provided.
    fn resolve(ctx: &Context) -> Result<Self::Handles, &'static str>;
}

impl Deps for () {
    type Handles = ();
    const NAMES: &'static [&'static str] = &[];
    fn resolve(_ctx: &Context) -> Result<(), &'static str> {
        Ok(())
    }
}

macro_rules! tuple_deps {
    ($($s:ident),+) => {
        impl<$($s: Service),+> Deps for ($($s,)+) {
            type Handles = ($($s::Handle,)+);
            const NAMES: &'static [&'static str] = &[$($s::NAME),+];
            fn resolve(ctx: &Context) -> Result<Self::Handles, &'static str> {
                Ok(($(ctx.get($s::KEY).ok_or($s::NAME)?,)+))
            }
        }
    };
}

tuple_deps!(A);
tuple_deps!(A, B);
tuple_deps!(A, B, C);
tuple_deps!(A, B, C, D);
tuple_deps!(A, B, C, D, E);
tuple_deps!(A, B, C, D, E, F);

/// The handles a plugin's `apply` receives.
pub type Handles<P> = <<P as Plugin>::Deps as Deps>::Handles;

/// A typed service key: the wire name and the handle type stored under it.
pub struct ServiceKey<T> {
    name: &'static str,
    _type: PhantomData<fn() -> T>,
}

impl<T> ServiceKey<T> {
    /// A key for the service called `name`.
    pub const fn new(name: &'static str) -> Self {
        Self { name, _type: PhantomData }
    }
    /// The wire name.
    pub const fn name(&self) -> &'static str {
        self.name
    }
}

impl<T> Clone for ServiceKey<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for ServiceKey<T> {}

impl<T> fmt::Debug for ServiceKey<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ServiceKey({})", self.name)
    }
}

/// Errors of composition: loading, applying and providing.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PluginError {
    /// A second provider for a service key.
    #[error(
        "service \"{key}\" is already provided by plugin \"{provider}\"; plugin \"{plugin}\" cannot provide it too"
    )]
    DuplicateService {
        /// The service key.
        key: String,
        /// The plugin that already provides it.
        provider: String,
        /// The plugin that tried to provide it too.
        plugin: String,
    },
    /// A configuration the plugin refuses (the plugin's exact message).
    #[error("{0}")]
    Config(String),
    /// A config that does not have the plugin's shape: an unknown key or a value of the wrong
    /// type. `message` is the deserializer's, with type names in plain words
    /// (`expected a number`, not `expected f64`; see [`plain_config_error`]).
    #[error("{plugin}: {message}")]
    InvalidConfig {
        /// The plugin whose config was refused.
        plugin: String,
        /// The deserializer's message, in plain words.
        message: String,
    },
    /// `apply` failed (the failing step's exact message).
    #[error("{0}")]
    Apply(String),
    /// A service the plugin needs is not provided (the one wording of a missing service).
    #[error("{plugin}: ctx.{service} is missing")]
    MissingService {
        /// The plugin that needs the service.
        plugin: String,
        /// The wire name of the missing service.
        service: String,
    },
    /// No plugin under that name.
    #[error("unknown plugin \"{0}\"")]
    UnknownPlugin(String),
    /// The plugin is already loaded.
    #[error("plugin \"{0}\" is already loaded")]
    AlreadyLoaded(String),
    /// The plugin is not loaded.
    #[error("plugin \"{0}\" is not loaded")]
    NotLoaded(String),
}

impl PluginError {
    /// An `apply` failure carrying `error`'s message.
    pub fn apply(error: impl fmt::Display) -> Self {
        Self::Apply(error.to_string())
    }

    /// A refused configuration carrying `error`'s message.
    pub fn config(error: impl fmt::Display) -> Self {
        Self::Config(error.to_string())
    }
}

impl From<ConfigError> for PluginError {
    fn from(error: ConfigError) -> Self {
        Self::Config(error.0)
    }
}

impl From<crate::tools::RegisterError> for PluginError {
    fn from(error: crate::tools::RegisterError) -> Self {
        Self::apply(error)
    }
}

impl From<crate::prompt::PromptError> for PluginError {
    fn from(error: crate::prompt::PromptError) -> Self {
        Self::apply(error)
    }
}

/// A configuration a plugin refuses at load time. The message is exact (pinned by tests
/// where it matters) and becomes [`PluginError::Config`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

impl ConfigError {
    /// A refusal carrying `error`'s message.
    pub fn new(error: impl fmt::Display) -> Self {
        Self(error.to_string())
    }
}

impl From<String> for ConfigError {
    fn from(message: String) -> Self {
        Self(message)
    }
}

/// An undo action recorded by a plugin; async so teardown can await processes.
pub type Effect = Box<dyn FnOnce() -> BoxFuture<'static, ()> + Send>;

/// A handle that undoes one registration. Dropping it does nothing: disposal is explicit.
#[must_use = "a registration stays until its disposer runs; hand it to PluginScope::add"]
pub struct Disposer(Option<Effect>);

impl Disposer {
    /// A disposer running a synchronous action.
    pub fn new(f: impl FnOnce() + Send + 'static) -> Self {
        Self(Some(Box::new(move || {
            f();
            Box::pin(async {})
        })))
    }

    /// A disposer running an async action.
    pub fn new_async<F>(f: impl FnOnce() -> F + Send + 'static) -> Self
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        Self(Some(Box::new(move || Box::pin(f()))))
    }

    /// A disposer that does nothing.
    pub fn noop() -> Self {
        Self(None)
    }

    /// Runs the undo action now.
    pub async fn dispose(mut self) {
        if let Some(f) = self.0.take() {
            f().await;
        }
    }

    fn into_effect(mut self) -> Option<Effect> {
        self.0.take()
    }
}

impl fmt::Debug for Disposer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Disposer")
    }
}

/// What every plugin provides: names, hard dependencies, a config checked once, and `apply`.
///
/// ```ignore
/// impl Plugin for ToolJobsPlugin {
///     const NAME: &'static str = "@deepseek-ai/dsh-tool-jobs";
///     const SHORT_NAME: &'static str = "tool-jobs";
///     type Deps = (Tools, Jobs, SystemPrompt);
///     type Config = ToolJobsConfig;
///     type Validated = CheckedToolJobsConfig;
///     fn validate(config: ToolJobsConfig) -> Result<CheckedToolJobsConfig, ConfigError> { .. }
///     fn apply(scope: &mut PluginScope, (tools, jobs, prompt): Handles<Self>, config: &CheckedToolJobsConfig)
///         -> Result<(), PluginError> { .. }
/// }
/// ```
pub trait Plugin: Send + Sync + 'static {
    /// The package name (`@deepseek-ai/dsh-tool-bash`).
    const NAME: &'static str;
    /// The short name used in compositions and config tables (`tool-bash`).
    const SHORT_NAME: &'static str;
    /// Services that must all exist before `apply` runs; `apply` receives their handles.
    /// Soft (call-time) dependencies are looked up when used instead.
    type Deps: Deps;
    /// The service names of [`Plugin::Deps`], in order (derived; not meant to be set).
    const INJECT: &'static [&'static str] = <Self::Deps as Deps>::NAMES;
    /// Typed configuration: defaults for absent keys, unknown keys refused.
    type Config: DeserializeOwned + schemars::JsonSchema + Default + Send + 'static;
    /// The configuration once checked: what `apply` works from.
    type Validated: Send + Sync + 'static;

    /// Load-time validation; the error is the exact message reported to the user. Runs once
    /// per load.
    fn validate(config: Self::Config) -> Result<Self::Validated, ConfigError>;

    /// Registers the plugin's effects into `scope`. Runs again, with the same validated config,
    /// whenever the dependencies are all present again after one was withdrawn.
    fn apply(
        scope: &mut PluginScope,
        deps: Handles<Self>,
        config: &Self::Validated,
    ) -> Result<(), PluginError>;
}

/// A plugin with its type erased, so compositions can name plugins at run time.
pub trait PluginFactory: Send + Sync {
    /// The package name.
    fn name(&self) -> &'static str;
    /// The short name.
    fn short_name(&self) -> &'static str;
    /// The names of the services the plugin needs.
    fn inject(&self) -> &'static [&'static str];
    /// JSON Schema of the config.
    fn config_schema(&self) -> Value;
    /// Parses and validates a config (`null` → defaults) into the plugin's validated value.
    fn parse_config(&self, value: Value) -> Result<Arc<dyn Any + Send + Sync>, PluginError>;
    /// Resolves the plugin's services and applies it with a value from `parse_config`.
    fn apply(&self, scope: &mut PluginScope, config: &(dyn Any + Send + Sync)) -> Result<(), PluginError>;
}

/// The erased form of a typed [`Plugin`].
pub struct Factory<P: Plugin>(PhantomData<fn() -> P>);

impl<P: Plugin> Factory<P> {
    /// The factory of `P`.
    pub const fn new() -> Self {
        Self(PhantomData)
    }
}

impl<P: Plugin> Default for Factory<P> {
    fn default() -> Self {
        Self::new()
    }
}

impl<P: Plugin> PluginFactory for Factory<P> {
    fn name(&self) -> &'static str {
        P::NAME
    }
    fn short_name(&self) -> &'static str {
        P::SHORT_NAME
    }
    fn inject(&self) -> &'static [&'static str] {
        <P::Deps as Deps>::NAMES
    }
    fn config_schema(&self) -> Value {
        serde_json::to_value(schemars::schema_for!(P::Config)).unwrap_or(Value::Null)
    }
    fn parse_config(&self, value: Value) -> Result<Arc<dyn Any + Send + Sync>, PluginError> {
        let config: P::Config = if value.is_null() {
            P::Config::default()
        } else {
            serde_json::from_value(value).map_err(|e| PluginError::InvalidConfig {
                plugin: P::SHORT_NAME.to_owned(),
                message: plain_config_error(&e.to_string()),
            })?
        };
        Ok(Arc::new(P::validate(config)?))
    }
    fn apply(&self, scope: &mut PluginScope, config: &(dyn Any + Send + Sync)) -> Result<(), PluginError> {
        let config = config
            .downcast_ref::<P::Validated>()
            .ok_or_else(|| PluginError::Config(format!("{}: config of the wrong type", P::SHORT_NAME)))?;
        let deps = <P::Deps as Deps>::resolve(scope.ctx()).map_err(|service| {
            PluginError::MissingService { plugin: P::SHORT_NAME.to_owned(), service: service.to_owned() }
        })?;
        P::apply(scope, deps, config)
    }
}

/// Rewords a config deserialization message for people writing config files: Rust type
/// names after `expected` become plain words, and so do `sequence`/`map` as the found type.
///
/// | deserializer says | reads |
/// |---|---|
/// | `f32`, `f64` | `a number` |
/// | `i8` … `i128`, `isize` | `an integer` |
/// | `u8` … `u128`, `usize` | `a non-negative integer` |
/// | `a sequence` | `an array` |
/// | `a map`, `struct <Name>` | `a table` |
/// | `path string` | `a string` |
///
/// Everything else (`a boolean`, `a string`, unknown-field lists) is kept as written.
pub fn plain_config_error(message: &str) -> String {
    let message = message.replacen("invalid type: sequence,", "invalid type: array,", 1).replacen(
        "invalid type: map,",
        "invalid type: table,",
        1,
    );
    let Some(at) = message.rfind(", expected ") else { return message };
    let (head, expected) = message.split_at(at + ", expected ".len());
    let plain = match expected {
        "f32" | "f64" => "a number",
        "i8" | "i16" | "i32" | "i64" | "i128" | "isize" => "an integer",
        "u8" | "u16" | "u32" | "u64" | "u128" | "usize" => "a non-negative integer",
        "a sequence" => "an array",
        "a map" => "a table",
        "path string" => "a string",
        other
            if other.strip_prefix("struct ").is_some_and(|name| !name.is_empty() && !name.contains(' ')) =>
        {
            "a table"
        }
        other => other,
    };
    format!("{head}{plain}")
}

/// Where a plugin records its effects while applying.
pub struct PluginScope {
    ctx: Context,
    plugin: String,
    effects: Vec<Effect>,
    provided: Vec<String>,
}

impl PluginScope {
    /// The context the plugin is applied into.
    pub fn ctx(&self) -> &Context {
        &self.ctx
    }

    /// The applying plugin's short name.
    pub fn plugin_name(&self) -> &str {
        &self.plugin
    }

    /// A service, which must exist (it is injected).
    pub fn get<T: Clone + Send + Sync + 'static>(&self, key: ServiceKey<T>) -> Option<T> {
        self.ctx.get(key)
    }

    /// Provides a service under `key`; removed when this plugin is disposed.
    pub fn provide<T: Clone + Send + Sync + 'static>(
        &mut self,
        key: ServiceKey<T>,
        value: T,
    ) -> Result<(), PluginError> {
        self.ctx.insert_service(key.name(), Arc::new(value), &self.plugin)?;
        self.provided.push(key.name().to_owned());
        Ok(())
    }

    /// Records an effect to undo on disposal.
    pub fn add(&mut self, disposer: Disposer) {
        if let Some(effect) = disposer.into_effect() {
            self.effects.push(effect);
        }
    }

    /// Records a synchronous undo action.
    pub fn on_dispose(&mut self, f: impl FnOnce() + Send + 'static) {
        self.add(Disposer::new(f));
    }
}

struct ServiceEntry {
    value: Arc<dyn Any + Send + Sync>,
    provider: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RowState {
    Pending,
    Applied,
}

struct PluginRow {
    factory: Arc<dyn PluginFactory>,
    config: Arc<dyn Any + Send + Sync>,
    state: RowState,
    effects: Vec<Effect>,
    provided: Vec<String>,
}

#[derive(Default)]
struct State {
    services: HashMap<String, ServiceEntry>,
    rows: Vec<PluginRow>,
}

struct Inner {
    state: Mutex<State>,
    /// Serializes load/unload so cascades never interleave.
    lifecycle: tokio::sync::Mutex<()>,
}

/// A composition: services by key plus the plugin rows that provide and consume them.
#[derive(Clone)]
pub struct Context {
    inner: Arc<Inner>,
}

/// A non-owning handle to a [`Context`], for services that look others up at call time
/// without keeping the composition alive.
#[derive(Clone)]
pub struct WeakContext(Weak<Inner>);

impl WeakContext {
    /// The context, if it still exists.
    pub fn upgrade(&self) -> Option<Context> {
        self.0.upgrade().map(|inner| Context { inner })
    }

    /// Looks a service up if the context still exists.
    pub fn get<T: Clone + Send + Sync + 'static>(&self, key: ServiceKey<T>) -> Option<T> {
        self.upgrade().and_then(|ctx| ctx.get(key))
    }
}

impl Default for Context {
    fn default() -> Self {
        Self::new()
    }
}

/// A plugin's state as [`Context::plugins`] reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginStatus {
    /// The plugin's package name.
    pub name: &'static str,
    /// The plugin's short name.
    pub short_name: &'static str,
    /// Whether the plugin is applied (every injected service it needs exists).
    pub applied: bool,
    /// Injected keys that are still missing.
    pub missing: Vec<String>,
}

impl Context {
    /// An empty composition: no services, no plugins.
    pub fn new() -> Self {
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(State::default()),
                lifecycle: tokio::sync::Mutex::new(()),
            }),
        }
    }

    /// A non-owning handle to this context.
    pub fn downgrade(&self) -> WeakContext {
        WeakContext(Arc::downgrade(&self.inner))
    }

    /// The service under `key`, if provided.
    pub fn get<T: Clone + Send + Sync + 'static>(&self, key: ServiceKey<T>) -> Option<T> {
        let state = self.inner.state.lock();
        state.services.get(key.name()).and_then(|e| e.value.downcast_ref::<T>().cloned())
    }

    /// Whether a service key is present.
    pub fn has(&self, key: &str) -> bool {
        self.inner.state.lock().services.contains_key(key)
    }

    /// Provides a service from outside any plugin (hosts, tests). Applies waiting plugins.
    pub fn provide<T: Clone + Send + Sync + 'static>(
        &self,
        key: ServiceKey<T>,
        value: T,
    ) -> Result<(), PluginError> {
        self.insert_service(key.name(), Arc::new(value), "<host>")?;
        self.apply_ready()
    }

    fn insert_service(
        &self,
        key: &str,
        value: Arc<dyn Any + Send + Sync>,
        provider: &str,
    ) -> Result<(), PluginError> {
        let mut state = self.inner.state.lock();
        if let Some(existing) = state.services.get(key) {
            return Err(PluginError::DuplicateService {
                key: key.to_owned(),
                provider: existing.provider.clone(),
                plugin: provider.to_owned(),
            });
        }
        state.services.insert(key.to_owned(), ServiceEntry { value, provider: provider.to_owned() });
        Ok(())
    }

    /// Loads a typed plugin with its config.
    pub fn load<P: Plugin>(&self, config: P::Config) -> Result<(), PluginError> {
        let validated = P::validate(config)?;
        self.load_erased(Arc::new(Factory::<P>::new()), Arc::new(validated))
    }

    /// Loads a typed plugin with its default config.
    pub fn load_default<P: Plugin>(&self) -> Result<(), PluginError> {
        self.load::<P>(P::Config::default())
    }

    /// Loads a plugin from a factory and an already parsed config.
    pub fn load_erased(
        &self,
        factory: Arc<dyn PluginFactory>,
        config: Arc<dyn Any + Send + Sync>,
    ) -> Result<(), PluginError> {
        {
            let mut state = self.inner.state.lock();
            if state.rows.iter().any(|r| r.factory.name() == factory.name()) {
                return Err(PluginError::AlreadyLoaded(factory.short_name().to_owned()));
            }
            state.rows.push(PluginRow {
                factory,
                config,
                state: RowState::Pending,
                effects: Vec::new(),
                provided: Vec::new(),
            });
        }
        self.apply_ready()
    }

    /// Applies every pending plugin whose injected services all exist, until none is left.
    /// A plugin whose `apply` fails is removed and the error returned (after the others applied).
    fn apply_ready(&self) -> Result<(), PluginError> {
        let mut first_error = None;
        loop {
            let next = {
                let state = self.inner.state.lock();
                state
                    .rows
                    .iter()
                    .find(|r| {
                        r.state == RowState::Pending
                            && r.factory.inject().iter().all(|k| state.services.contains_key(*k))
                    })
                    .map(|r| (r.factory.clone(), r.config.clone()))
            };
            let Some((factory, config)) = next else { break };
            let mut scope = PluginScope {
                ctx: self.clone(),
                plugin: factory.short_name().to_owned(),
                effects: Vec::new(),
                provided: Vec::new(),
            };
            let outcome = factory.apply(&mut scope, config.as_ref());
            let PluginScope { effects, provided, .. } = scope;
            match outcome {
                Ok(()) => {
                    let mut state = self.inner.state.lock();
                    if let Some(row) = state.rows.iter_mut().find(|r| r.factory.name() == factory.name()) {
                        row.state = RowState::Applied;
                        row.effects = effects;
                        row.provided = provided;
                    }
                }
                Err(err) => {
                    // Undo whatever the failed apply registered, then drop the row.
                    {
                        let mut state = self.inner.state.lock();
                        for key in &provided {
                            state.services.remove(key);
                        }
                        state.rows.retain(|r| r.factory.name() != factory.name());
                    }
                    for effect in effects.into_iter().rev() {
                        spawn_or_block(effect());
                    }
                    first_error.get_or_insert(err);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Unloads a plugin by package or short name: disposes its effects in reverse order, then
    /// every plugin that injected a service it provided goes back to pending.
    pub async fn unload(&self, name: &str) -> Result<(), PluginError> {
        let _guard = self.inner.lifecycle.lock().await;
        let exists = {
            let state = self.inner.state.lock();
            state.rows.iter().any(|r| r.factory.name() == name || r.factory.short_name() == name)
        };
        if !exists {
            return Err(PluginError::NotLoaded(name.to_owned()));
        }
        self.deactivate(name).await;
        let mut state = self.inner.state.lock();
        state.rows.retain(|r| r.factory.name() != name && r.factory.short_name() != name);
        Ok(())
    }

    /// Removes a host-provided service, disposing dependants back to pending.
    pub async fn withdraw(&self, key: &str) {
        let _guard = self.inner.lifecycle.lock().await;
        self.inner.state.lock().services.remove(key);
        self.deactivate_dependants(&[key.to_owned()]).await;
    }

    /// Disposes an applied plugin (and, first, its dependants), leaving it pending.
    fn deactivate<'a>(&'a self, name: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let provided = {
                let state = self.inner.state.lock();
                match state.rows.iter().find(|r| {
                    (r.factory.name() == name || r.factory.short_name() == name)
                        && r.state == RowState::Applied
                }) {
                    Some(row) => row.provided.clone(),
                    None => return,
                }
            };
            // Dependants go first: they registered on top of this plugin's services.
            self.deactivate_dependants(&provided).await;
            let effects = {
                let mut state = self.inner.state.lock();
                let Some(row) = state.rows.iter_mut().find(|r| {
                    (r.factory.name() == name || r.factory.short_name() == name)
                        && r.state == RowState::Applied
                }) else {
                    return;
                };
                row.state = RowState::Pending;
                row.provided.clear();
                let effects = std::mem::take(&mut row.effects);
                for key in &provided {
                    state.services.remove(key);
                }
                effects
            };
            for effect in effects.into_iter().rev() {
                effect().await;
            }
        })
    }

    async fn deactivate_dependants(&self, keys: &[String]) {
        if keys.is_empty() {
            return;
        }
        let dependants: Vec<&'static str> = {
            let state = self.inner.state.lock();
            state
                .rows
                .iter()
                .rev()
                .filter(|r| {
                    r.state == RowState::Applied
                        && r.factory.inject().iter().any(|k| keys.iter().any(|p| p == k))
                })
                .map(|r| r.factory.name())
                .collect()
        };
        for name in dependants {
            self.deactivate(name).await;
        }
    }

    /// Disposes every plugin in reverse load order and drops all services.
    pub async fn dispose(&self) {
        let _guard = self.inner.lifecycle.lock().await;
        loop {
            let last_applied = {
                let state = self.inner.state.lock();
                state.rows.iter().rev().find(|r| r.state == RowState::Applied).map(|r| r.factory.name())
            };
            let Some(name) = last_applied else { break };
            self.deactivate(name).await;
            let mut state = self.inner.state.lock();
            state.rows.retain(|r| r.factory.name() != name);
        }
        let mut state = self.inner.state.lock();
        state.rows.clear();
        state.services.clear();
    }

    /// Every loaded plugin with its state, in load order.
    pub fn plugins(&self) -> Vec<PluginStatus> {
        let state = self.inner.state.lock();
        state
            .rows
            .iter()
            .map(|r| PluginStatus {
                name: r.factory.name(),
                short_name: r.factory.short_name(),
                applied: r.state == RowState::Applied,
                missing: r
                    .factory
                    .inject()
                    .iter()
                    .filter(|k| !state.services.contains_key(**k))
                    .map(|k| (*k).to_owned())
                    .collect(),
            })
            .collect()
    }
}

/// Runs an undo future from synchronous code: on the current runtime when there is one.
fn spawn_or_block(fut: BoxFuture<'static, ()>) {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => {
            handle.spawn(fut);
        }
        Err(_) => futures::executor::block_on(fut),
    }
}

#[cfg(test)]
mod config_error_tests {
    use super::*;

    struct Typed;

    #[derive(Clone, Debug, Default, serde::Deserialize, schemars::JsonSchema)]
    #[serde(rename_all = "camelCase", deny_unknown_fields, default)]
    struct TypedConfig {
        grace_ms: f64,
        limit: u64,
        offset: i32,
        enabled: bool,
        name: String,
        paths: Vec<String>,
    }

    impl Plugin for Typed {
        const NAME: &'static str = "@test/typed";
        const SHORT_NAME: &'static str = "typed";
        type Deps = ();
        type Config = TypedConfig;
        type Validated = TypedConfig;

        fn validate(config: TypedConfig) -> Result<TypedConfig, ConfigError> {
            Ok(config)
        }

        fn apply(_scope: &mut PluginScope, _deps: (), _config: &TypedConfig) -> Result<(), PluginError> {
            Ok(())
        }
    }

    fn refusal(config: Value) -> PluginError {
        Factory::<Typed>::new().parse_config(config).expect_err("refused")
    }

    #[test]
    fn wrong_types_are_named_in_plain_words() {
        let cases = [
            (serde_json::json!({"graceMs": "soon"}), "invalid type: string \"soon\", expected a number"),
            (
                serde_json::json!({"limit": -1}),
                "invalid value: integer `-1`, expected a non-negative integer",
            ),
            (serde_json::json!({"offset": 1.5}), "invalid type: floating point `1.5`, expected an integer"),
            (serde_json::json!({"enabled": "yes"}), "invalid type: string \"yes\", expected a boolean"),
            (serde_json::json!({"name": 3}), "invalid type: integer `3`, expected a string"),
            (serde_json::json!({"paths": {"a": 1}}), "invalid type: table, expected an array"),
            (serde_json::json!({"name": [1]}), "invalid type: array, expected a string"),
            (serde_json::json!(5), "invalid type: integer `5`, expected a table"),
        ];
        for (config, message) in cases {
            let error = refusal(config);
            assert_eq!(error, PluginError::InvalidConfig { plugin: "typed".into(), message: message.into() });
            assert_eq!(error.to_string(), format!("typed: {message}"));
        }
    }

    struct Named;
    impl Service for Named {
        const NAME: &'static str = "named";
        type Handle = Arc<String>;
    }

    struct Needy;
    impl Plugin for Needy {
        const NAME: &'static str = "@test/needy";
        const SHORT_NAME: &'static str = "needy";
        type Deps = (Named,);
        type Config = TypedConfig;
        type Validated = ();
        fn validate(_config: TypedConfig) -> Result<(), ConfigError> {
            Ok(())
        }
        fn apply(_scope: &mut PluginScope, _deps: Handles<Self>, (): &()) -> Result<(), PluginError> {
            Ok(())
        }
    }

    #[test]
    fn inject_is_derived_and_a_missing_service_has_one_wording() {
        assert_eq!(Needy::INJECT, ["named"]);
        assert_eq!(Factory::<Needy>::new().inject(), ["named"]);
        let ctx = Context::new();
        let mut scope =
            PluginScope { ctx, plugin: "needy".into(), effects: Vec::new(), provided: Vec::new() };
        let error = Factory::<Needy>::new().apply(&mut scope, &()).expect_err("named is missing");
        assert_eq!(error.to_string(), "needy: ctx.named is missing");
    }

    #[test]
    fn unknown_fields_keep_their_wording() {
        let error = refusal(serde_json::json!({"grace": 1}));
        let PluginError::InvalidConfig { plugin, message } = error else { panic!("not a shape error") };
        assert_eq!(plugin, "typed");
        assert!(message.starts_with("unknown field `grace`, expected one of `graceMs`"), "{message}");
    }

    #[test]
    fn plain_words_leave_other_messages_alone() {
        assert_eq!(plain_config_error("missing field `mode`"), "missing field `mode`");
        assert_eq!(plain_config_error("x, expected path string"), "x, expected a string");
        assert_eq!(plain_config_error("x, expected struct A B"), "x, expected struct A B");
    }
}
