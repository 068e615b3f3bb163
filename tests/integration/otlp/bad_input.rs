//! Bad OTLP input end to end.
