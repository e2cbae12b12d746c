{#- Destination change sets: one generated model per declared destination and table
    (lakesync/lakehouse/models.py renders them), the rows changed or deleted since the destination's
    watermark. `lakesync pipeline run` and `lakesync materialise` read every destination's
    watermark and pass them as the var `lakesync_watermarks`: {destination: {table: position}}.
    A plain `dbt build` without it builds each change set from -1: every row. -#}

{#- The watermark (landing position, a whole number) `destination` has shipped `table` through;
    -1 when the var does not name it. -#}
{% macro lakesync_since(destination, table) -%}
    {%- set value = var('lakesync_watermarks', {}).get(destination, {}).get(table, -1) -%}
    {%- if not modules.re.fullmatch('-?[0-9]{1,20}', value | string) -%}
        {{ exceptions.raise_compiler_error(
            'var lakesync_watermarks: the watermark of ' ~ destination ~ '.' ~ table
            ~ ' must be a whole number (a landing position), got ' ~ value) }}
    {%- endif -%}
    {{ value | string }}
{%- endmacro %}


{#- Pre-hook: forget which watermark the table was built from, and how far it was shipped,
    before it is rebuilt, so a run that dies half-way never leaves a table that claims either
    (shipping rebuilds a change set that records neither). -#}
{% macro lakesync_change_set_unmark() -%}
    {%- if load_relation(this) is not none -%}
        alter table {{ this }} unset tblproperties if exists ('lakesync.since', 'lakesync.drained')
    {%- endif -%}
{%- endmacro %}


{#- Post-hook: record the watermark the change set was built from. -#}
{% macro lakesync_change_set_mark(destination, table) -%}
    alter table {{ this }} set tblproperties ('lakesync.since' = '{{ lakesync_since(destination, table) }}')
{%- endmacro %}
