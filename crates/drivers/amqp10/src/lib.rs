//! # msgbench-driver-amqp10
//!
//! (skeleton: being written)
