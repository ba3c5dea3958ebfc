"""The export: a versioned SavedModel whose signatures turn raw strings into raw strings."""
