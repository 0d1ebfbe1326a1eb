"""PostgreSQL layer: embedded server, pool, migrations, SQL."""
