//! Tests of the todo and skills components end to end.
