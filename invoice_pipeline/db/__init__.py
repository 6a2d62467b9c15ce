"""Where the database is (embedded or external), how its schema gets there, and its queries."""
