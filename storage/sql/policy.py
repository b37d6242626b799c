"""What ad hoc SQL (`viewmill sql`) may run: an explicit classification of every statement
start, pragma, table function, function and setting that DuckDB 1.5.5 exposes with the
extensions viewmill loads (ducklake, httpfs, sqlite_scanner, postgres_scanner).

Only names classified ALLOWED run; anything else, a name DuckDB adds later included, is
refused. tests/storage/sql/test_policy.py compares these tables with DuckDB's own
catalogs (duckdb_functions(), duckdb_settings()), so an upgrade fails it until each new
name is classified here.
"""

from __future__ import annotations

from enum import StrEnum

from viewmill.storage.sql.names import ALLOWED_FUNCTIONS


class Use(StrEnum):
    """Why a name is refused (the text completes "it ..."), or ALLOWED."""

    ALLOWED = "only reads the lake"
    FILES = "reads or lists files other than the lake's Parquet data"
    SECRETS = "reads DuckDB's settings, secrets, logs or profiles, where credentials live"
    NETWORK = "reaches a server other than the lake's data store"
    WRITE = "writes to the lake, its catalog or a file"
    EXEC = "runs SQL or reads Python objects handed to it as data, out of this check's sight"
    STATE = "changes the session (settings, logging, profiling, checkpoints, sequences, random seed)"


def _classify(*groups: tuple[str, Use]) -> dict[str, Use]:
    """Names (space-separated) to their use; a name in two groups is a mistake, not an override."""
    table: dict[str, Use] = {}
    for text, use in groups:
        for name in text.split():
            if name in table:
                raise ValueError(f"sandbox policy: {name!r} is classified twice ({table[name]!r}, {use!r})")
            table[name] = use
    return table


# The first keyword of each statement: only those that begin a query.
START_KEYWORDS = frozenset(
    "select with from values table describe desc show summarize explain pivot unpivot pivot_wider pivot_longer "
    "pragma (".split()
)

# Table functions (FROM f(...), and the scans a plan holds), table macros and PRAGMA-generated queries.
TABLE_FUNCTIONS: dict[str, Use] = _classify(
    # Generators and the lake's own tables, read through their catalog or their Parquet files (the
    # connection's allowed_directories keeps the Parquet readers inside the data folder).
    (
        "range generate_series repeat repeat_row unnest json_each json_tree summary test_all_types "
        "test_vector_types icu_calendar_names pg_timezone_names histogram histogram_values seq_scan ducklake_scan "
        "read_parquet parquet_scan parquet_metadata parquet_schema parquet_file_metadata parquet_kv_metadata "
        "parquet_full_metadata parquet_bloom_probe ducklake_snapshots ducklake_table_info ducklake_table_insertions "
        "ducklake_table_deletions ducklake_table_changes ducklake_list_files ducklake_current_snapshot "
        "ducklake_last_committed_snapshot ducklake_options ducklake_settings",
        Use.ALLOWED,
    ),
    # The catalog's own description: names, types, sizes; never a setting's or a secret's value.
    (
        "duckdb_columns duckdb_constraints duckdb_databases duckdb_dependencies duckdb_functions duckdb_indexes "
        "duckdb_keywords duckdb_schemas duckdb_sequences duckdb_tables duckdb_types duckdb_views duckdb_optimizers "
        "duckdb_coordinate_systems duckdb_approx_database_count duckdb_connection_count duckdb_memory "
        "duckdb_temporary_files duckdb_external_file_cache duckdb_prepared_statements "
        "duckdb_variables duckdb_table_sample pragma_collations pragma_database_size pragma_metadata_info "
        "pragma_platform pragma_show pragma_storage_info pragma_table_info pragma_user_agent pragma_version",
        Use.ALLOWED,
    ),
    (
        "read_csv read_csv_auto read_json read_json_auto read_json_objects read_json_objects_auto read_ndjson "
        "read_ndjson_auto read_ndjson_objects read_blob read_text read_duckdb sniff_csv glob read_postgres_binary "
        "sqlite_scan sqlite_query duckdb_extensions",
        Use.FILES,
    ),
    (
        "duckdb_secrets which_secret duckdb_secret_types duckdb_settings duckdb_logs duckdb_log_contexts "
        "duckdb_logs_parsed duckdb_profiling_settings",
        Use.SECRETS,
    ),
    ("postgres_scan postgres_scan_pushdown postgres_query", Use.NETWORK),
    (
        "ducklake_add_data_files ducklake_cleanup_old_files ducklake_commit ducklake_delete_orphaned_files "
        "ducklake_expire_snapshots ducklake_flush_inlined_data ducklake_merge_adjacent_files "
        "ducklake_rewrite_data_files ducklake_set_commit_message ducklake_set_option checkpoint force_checkpoint "
        "postgres_execute postgres_attach sqlite_attach truncate_duckdb_logs",
        Use.WRITE,
    ),
    (
        "query query_table json_execute_serialized_sql python_map_function pandas_scan arrow_scan arrow_scan_dumb",
        Use.EXEC,
    ),
    (
        "enable_logging disable_logging enable_profiling disable_profiling pg_clear_cache postgres_configure_pool",
        Use.STATE,
    ),
)

# `PRAGMA name ...` statements. The allowed ones are rewritten by DuckDB's parser into a query,
# which is then checked like any other; the rest act on the session or the files.
PRAGMAS: dict[str, Use] = _classify(
    (
        "collations database_list database_size functions metadata_info platform show "
        "show_databases show_tables show_tables_expanded storage_info table_info user_agent version",
        Use.ALLOWED,
    ),
    ("import_database extension_versions", Use.FILES),
    ("add_parquet_key all_profiling_output", Use.SECRETS),
    ("copy_database force_checkpoint", Use.WRITE),
    ("json_execute_serialized_sql", Use.EXEC),
    (
        "disable_checkpoint_on_shutdown enable_checkpoint_on_shutdown disable_object_cache enable_object_cache "
        "disable_optimizer enable_optimizer disable_print_progress_bar enable_print_progress_bar disable_profile "
        "enable_profile disable_profiling enable_profiling disable_progress_bar enable_progress_bar "
        "disable_verification enable_verification disable_verify_external verify_external disable_verify_fetch_row "
        "verify_fetch_row disable_verify_parallelism verify_parallelism disable_verify_serializer verify_serializer",
        Use.STATE,
    ),
)

# Scalar, aggregate and macro functions refused; every other one must be in ALLOWED_FUNCTIONS.
REFUSED_FUNCTIONS: dict[str, Use] = {
    "current_setting": Use.SECRETS,
    "nextval": Use.STATE,
    "currval": Use.STATE,
    "setseed": Use.STATE,
    "write_log": Use.STATE,
    "json_serialize_sql": Use.EXEC,
    "json_serialize_plan": Use.EXEC,  # binds, and with optimize := true folds, the SQL it is given
    "json_deserialize_sql": Use.EXEC,
}

# Written as functions in a select list but planned as operators (LOGICAL_UNNEST): not in duckdb_functions().
SYNTAX_FUNCTIONS = frozenset({"unnest", "unlist"})

# Plan operators of a query (json_serialize_plan): reads only. INSERT, COPY_TO_FILE, CREATE_*, ATTACH... never.
READ_OPERATORS = frozenset(
    "LOGICAL_PROJECTION LOGICAL_FILTER LOGICAL_AGGREGATE_AND_GROUP_BY LOGICAL_WINDOW LOGICAL_UNNEST LOGICAL_LIMIT "
    "LOGICAL_ORDER_BY LOGICAL_TOP_N LOGICAL_DISTINCT LOGICAL_SAMPLE LOGICAL_PIVOT LOGICAL_GET LOGICAL_CHUNK_GET "
    "LOGICAL_DELIM_GET LOGICAL_EXPRESSION_GET LOGICAL_DUMMY_SCAN LOGICAL_EMPTY_RESULT LOGICAL_CTE_REF LOGICAL_JOIN "
    "LOGICAL_DELIM_JOIN LOGICAL_COMPARISON_JOIN LOGICAL_ANY_JOIN LOGICAL_CROSS_PRODUCT LOGICAL_POSITIONAL_JOIN "
    "LOGICAL_ASOF_JOIN LOGICAL_DEPENDENT_JOIN LOGICAL_UNION LOGICAL_EXCEPT LOGICAL_INTERSECT LOGICAL_RECURSIVE_CTE "
    "LOGICAL_MATERIALIZED_CTE".split()
)

# Settings. None is readable (current_setting and duckdb_settings are refused) or changeable (SET is
# refused and the configuration locked); the SECRETS ones are also emptied before a query runs, so
# not even a hole in the above could read a credential back.
SETTINGS: dict[str, Use] = _classify(
    (
        "s3_access_key_id s3_secret_access_key s3_session_token s3_kms_key_id http_proxy_username "
        "http_proxy_password pg_oauth_token password user username",
        Use.SECRETS,
    ),
    (
        "allowed_directories allowed_paths temp_directory max_temp_directory_size temp_file_encryption "
        "secret_directory default_secret_storage allow_persistent_secrets allow_unredacted_secrets home_directory "
        "extension_directory extension_directories file_search_path profile_output profiling_output log_query_path "
        "http_logging_output logging_storage ca_cert_file enable_external_access disabled_filesystems "
        "enable_external_file_cache validate_external_file_cache python_enable_replacements python_scan_all_frames "
        "access_mode",
        Use.FILES,
    ),
    (
        "autoinstall_extension_repository custom_extension_repository autoinstall_known_extensions "
        "autoload_known_extensions allow_community_extensions allow_unsigned_extensions "
        "allow_extensions_metadata_mismatch http_proxy http_keep_alive http_retries http_retry_backoff "
        "http_retry_wait_ms http_timeout httpfs_client_implementation httpfs_connection_caching "
        "httpfs_enable_credential_refresh enable_curl_server_cert_verification enable_server_cert_verification "
        "enable_http_metadata_cache enable_http_logging merge_http_secret_into_s3_request force_download "
        "force_download_threshold auto_fallback_to_full_download allow_asterisks_in_http_paths "
        "unsafe_disable_etag_checks force_mbedtls_unsafe custom_user_agent duckdb_api hf_max_per_page s3_endpoint "
        "s3_region s3_url_style s3_use_ssl s3_requester_pays s3_allow_recursive_globbing s3_url_compatibility_mode "
        "s3_version_id_pinning s3_uploader_max_filesize s3_uploader_max_parts_per_file s3_uploader_thread_limit "
        "enable_global_s3_configuration pg_connection_cache pg_connection_limit pg_debug_show_queries "
        "pg_idle_in_transaction_timeout_millis pg_pool_acquire_mode pg_pool_enable_reaper_thread "
        "pg_pool_enable_thread_local_cache pg_pool_health_check_query pg_pool_idle_timeout_millis "
        "pg_pool_max_connections pg_pool_max_lifetime_millis pg_pool_wait_timeout_millis pg_staleness_query "
        "pg_staleness_query_enabled pg_statement_timeout_millis",
        Use.NETWORK,
    ),
    # How queries run: memory, threads, optimisers, formats, logging levels (no path, no credential).
    (
        "Calendar TimeZone __delta_only_variant_encoding_enabled allocator_background_threads "
        "allocator_bulk_deallocation_flush_threshold allocator_flush_threshold allow_parser_override_extension "
        "allowed_configs arrow_large_buffer_size arrow_lossless_conversion arrow_output_list_view "
        "arrow_output_version asof_loop_join_threshold auto_checkpoint_skip_wal_threshold binary_as_string "
        "block_allocator_memory catalog_error_max_schemas checkpoint_threshold "
        "current_transaction_invalidation_policy custom_profiling_settings debug_asof_iejoin debug_checkpoint_abort "
        "debug_checkpoint_sleep_ms debug_eviction_queue_sleep_micro_seconds debug_force_external "
        "debug_force_no_cross_product debug_physical_table_scan_execution_strategy debug_skip_checkpoint_on_commit "
        "debug_verify_blocks debug_verify_vector debug_window_mode default_block_size default_collation "
        "default_null_order default_order deprecated_using_key_syntax disable_database_invalidation "
        "disable_parquet_prefetching disable_timestamptz_casts disabled_compression_methods disabled_log_types "
        "disabled_optimizers ducklake_default_data_inlining_row_limit ducklake_max_retry_count "
        "ducklake_retry_backoff ducklake_retry_wait_ms ducklake_target_file_size ducklake_write_deletion_vectors "
        "dynamic_or_filter_threshold enable_caching_operators enable_fsst_vectors enable_geoparquet_conversion "
        "enable_logging enable_macro_dependencies enable_object_cache enable_profiling enable_progress_bar "
        "enable_progress_bar_print enable_view_dependencies enabled_log_types errors_as_json "
        "experimental_metadata_reuse explain_output external_threads force_bitpacking_mode "
        "force_column_metadata_reuse force_compression force_variant_shredding geometry_minimum_shredding_size "
        "ieee_floating_point_ops ignore_unknown_crs immediate_transaction_mode index_scan_max_count "
        "index_scan_percentage integer_division lambda_syntax late_materialization_max_rows lock_configuration "
        "logging_level logging_mode max_expression_depth max_memory max_vacuum_tasks memory_limit "
        "merge_join_threshold nested_loop_join_threshold null_order old_implicit_casting "
        "order_by_non_integer_literal ordered_aggregate_threshold pandas_analyze_sample parquet_metadata_cache "
        "partitioned_write_flush_threshold partitioned_write_max_open_files perfect_ht_threshold "
        "pg_array_as_varchar pg_experimental_filter_pushdown pg_null_byte_replacement pg_pages_per_task "
        "pg_use_binary_copy pg_use_ctid_scan pg_use_information_schema_introspection pg_use_text_protocol "
        "pin_threads pivot_filter_threshold pivot_limit prefer_range_joins prefetch_all_parquet_files "
        "preserve_identifier_case preserve_insertion_order produce_arrow_string_view profiling_coverage "
        "profiling_mode progress_bar_time scalar_subquery_error_on_multiple_rows scheduler_process_partial schema "
        "search_path sqlite_all_varchar sqlite_debug_show_queries sqlite_disable_multithreaded_scans "
        "storage_block_prefetch storage_compatibility_version streaming_buffer_size threads vacuum_rebuild_indexes "
        "variant_minimum_shredding_size wal_autocheckpoint wal_autocheckpoint_entries warnings_as_errors "
        "worker_threads write_buffer_row_group_count write_buffer_row_group_memory_limit zstd_min_string_length",
        Use.ALLOWED,
    ),
)

CREDENTIAL_SETTINGS = tuple(name for name, use in SETTINGS.items() if use is Use.SECRETS)


def function_use(name: str, *, table: bool) -> Use | None:
    """How a function may be used: a table function when `table`, else scalar, aggregate or
    macro; None for a name this policy does not know (refused)."""
    key = name.lower()
    if table:
        return TABLE_FUNCTIONS.get(key)
    if key in REFUSED_FUNCTIONS:
        return REFUSED_FUNCTIONS[key]
    return Use.ALLOWED if key in ALLOWED_FUNCTIONS or key in SYNTAX_FUNCTIONS else None
