//! What is read from measurements, without I/O: summaries and their
//! intervals (`stats`), a stream's verdict from TCP_INFO (`flow`), shapes
//! of a distribution (`shape`), comparisons and the stopping rule
//! (`compare`, `stopping`), a survey's conclusions (`survey`) and the
//! tuning advice (`tune`).

pub mod compare;
pub mod flow;
pub mod shape;
pub mod stats;
pub mod stopping;
pub mod survey;
pub mod tune;
