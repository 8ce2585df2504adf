pub mod fakes;
pub mod raw;
