"""Model files: .rknn header and metadata, ONNX metadata, the default model, the input-file rule."""
