//! StatsD/DogStatsD line parser.
