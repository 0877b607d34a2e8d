"""The portal's storage: tables (tables.py), engines and request sessions (engine.py),
migrations (migrate.py and the one Alembic tree in migrations/)."""
