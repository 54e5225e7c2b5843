"""The run store (SQLite, WAL): schema, migrations, reading and writing."""
