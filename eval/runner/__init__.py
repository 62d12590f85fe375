"""Running an evaluation: settings, decoding, the engine, generation, scoring, score files."""
