"""Reading traces back: from the embedded OTLP/JSON file or Jaeger, into steps and their phases."""
