"""The schema: scenario files and the runtime settings they carry."""
