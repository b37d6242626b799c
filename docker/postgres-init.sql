-- The lake's DuckLake catalog lives in its own database beside Prefect's.
CREATE DATABASE viewmill OWNER viewmill;
