{#-
  Iceberg maintenance on Spark: compact small data files, rewrite manifests, expire old snapshots
  and remove orphan files, through Iceberg's Spark procedures (`CALL lake.system.…`).

  - `dbt run-operation lakesync_maintenance`: every table of the landing namespace (the landing
    table, the registry, the intermediate models) and of `analytics` (the current-state models).
  - `dbt run-operation lakesync_maintain_table --args '{table: analytics.todos}'`: one table
    (what `lakesync compact` runs, table by table).
  - As a post-hook: `+post-hook: "{{ lakesync_maintain_table(this) }}"` (it runs its statements
    while rendering and leaves no SQL behind): `dbt run` builds the model, then maintains its
    table (tests/lakehouse/test_compaction.py).

  Retention comes from the environment LakeSettings.dbt_env() sets, in seconds:
  LAKESYNC_SNAPSHOT_RETENTION (snapshots younger stay, so time travel to them answers),
  LAKESYNC_SNAPSHOT_RETAIN_LAST (snapshots kept whatever their age) and LAKESYNC_ORPHAN_FILE_AGE
  (unreferenced files younger stay: a writer may be about to commit them).
-#}

{% macro lakesync_maintenance() %}
    {%- for namespace in [var('landing_schema'), 'analytics'] -%}
        {%- for row in run_query('show tables in ' ~ namespace) -%}
            {%- do lakesync_maintain_table(namespace ~ '.' ~ row['tableName']) -%}
        {%- endfor -%}
    {%- endfor -%}
{% endmacro %}


{% macro lakesync_maintain_table(table) %}
    {%- if execute -%}
        {%- set name = table | string | replace('`', '') -%}
        {%- set dt = modules.datetime -%}
        {%- set now = dt.datetime.utcnow() -%}
        {%- set retention = env_var('LAKESYNC_SNAPSHOT_RETENTION', '604800') | int -%}
        {%- set orphan_age = env_var('LAKESYNC_ORPHAN_FILE_AGE', '259200') | int -%}
        {#-
          Manifests first: a rewrite of data files leaves a manifest listing only the replaced
          files, which the flusher's next append (pyiceberg) drops; rewriting manifests while
          that happens fails Iceberg's validation, so it runs before, when none is left.
        -#}
        {%- do run_query("call lake.system.rewrite_manifests(table => '" ~ name ~ "')") -%}
        {%- set rewritten = run_query(
            "call lake.system.rewrite_data_files(table => '" ~ name ~ "', "
            ~ "options => map('min-input-files', '2', 'delete-file-threshold', '1'))"
        ) -%}
        {#- After the rewrites: their commits stack on top of the snapshot with the position. -#}
        {%- set retain_last = [
            env_var('LAKESYNC_SNAPSHOT_RETAIN_LAST', '1') | int, lakesync_position_depth(name)
        ] | max -%}
        {%- set expired = run_query(
            "call lake.system.expire_snapshots(table => '" ~ name ~ "', older_than => "
            ~ lakesync_timestamp(now - dt.timedelta(seconds=retention))
            ~ ", retain_last => " ~ retain_last ~ ")"
        ) -%}
        {#- On object storage Spark has no Hadoop file system for s3://: list through the
            table's own FileIO (S3FileIO) instead. -#}
        {%- set prefix_listing = ", prefix_listing => true"
            if env_var('LAKESYNC_SPARK_IO_IMPL', '') else "" -%}
        {%- set orphans = run_query(
            "call lake.system.remove_orphan_files(table => '" ~ name ~ "', older_than => "
            ~ lakesync_timestamp(now - dt.timedelta(seconds=orphan_age)) ~ prefix_listing ~ ")"
        ) -%}
        {{ log(
            name ~ ': ' ~ rewritten.rows[0]['rewritten_data_files_count'] ~ ' data files rewritten '
            ~ 'into ' ~ rewritten.rows[0]['added_data_files_count'] ~ ', '
            ~ expired.rows[0]['deleted_data_files_count'] ~ ' data files of expired snapshots deleted, '
            ~ (orphans.rows | length) ~ ' orphan files removed',
            info=True
        ) }}
    {%- endif -%}
{% endmacro %}


{#- A TIMESTAMP literal in the session's time zone (UTC): procedures take no current_timestamp(). -#}
{% macro lakesync_timestamp(instant) -%}
    TIMESTAMP '{{ instant.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] }}'
{%- endmacro %}


{#-
  How many of the landing table's newest snapshots must stay so that the newest one recording the
  hot-log position (`lakesync.flushed-through`) is still an ancestor of the current snapshot:
  the flusher resumes from it (lakesync.lakehouse.catalog.landing_state), and maintenance commits do not
  carry it. 1 for every other table.
-#}
{% macro lakesync_position_depth(table) %}
    {%- if table != var('landing_schema') ~ '.landing' -%}
        {{ return(1) }}
    {%- endif -%}
    {%- set snapshots = table ~ '.snapshots' -%}
    {%- set depth = run_query(
        "select count(*) from " ~ snapshots ~ " where committed_at >= (select max(committed_at) "
        ~ "from " ~ snapshots ~ " where summary['lakesync.flushed-through'] is not null)"
    ) -%}
    {{ return([depth.rows[0][0] | int, 1] | max) }}
{% endmacro %}

