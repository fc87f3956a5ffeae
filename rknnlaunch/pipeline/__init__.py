"""Detection pipelines: letterbox -> infer -> decode in the pool's workers (`Detector`)."""
