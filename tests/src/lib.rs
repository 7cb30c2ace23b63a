//! Helpers shared by the end-to-end tests: fixture paths, temp dirs, commands.
