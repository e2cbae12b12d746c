{#- Typed current state of one synced table, generated from its registered schema.
    `columns` is a list of {name, type[, precision, scale]} (docs/protocol.md §10 types). One row per live row per gateway:
    gateway_id, row_id, one typed column per schema column, _hlc (the HLC of the row's last change),
    _changed_at (its wall time) and _ingest_hlc (landing position of the row's last delta). -#}

{#- A cell's canonical JSON text (landing `value_json`) as the column's SQL type, with Spark
    built-ins only, so a plain `dbt build` needs no Python UDF. The same decoding as
    lakesync/cells.py (fresh reads and destinations use those; a test holds them equal),
    with the same regular expressions: a value of the wrong type for the column reads null; a
    `json` column keeps the canonical text; a column reads every value of a type that widens to
    its own (integer -> decimal -> number, any type -> string). `precision` and `scale` are a
    decimal column's. -#}
{% macro lakesync_decode(type, expr, precision=none, scale=none) -%}
    {%- set integer = '-?(0|[1-9][0-9]*)' -%}
    {%- set year = '([0-9]{3}[1-9]|[0-9]{2}[1-9][0-9]|[0-9][1-9][0-9]{2}|[1-9][0-9]{3})' -%}
    {%- set unquoted = 'substr(' ~ expr ~ ', 2, length(' ~ expr ~ ') - 2)' -%}
    {%- if type == 'string' -%}
        case when startswith({{ expr }}, '"') then get_json_object(concat('[', {{ expr }}, ']'), '$[0]')
            when {{ expr }} <> 'null' then {{ expr }} end
    {%- elif type == 'number' -%}
        case when {{ expr }} rlike '^-?[0-9]' then cast({{ expr }} as double)
            when {{ expr }} rlike '^"{{ integer }}([.][0-9]+)?"$' then cast({{ unquoted }} as double) end
    {%- elif type == 'boolean' -%}
        case {{ expr }} when 'true' then true when 'false' then false end
    {%- elif type == 'json' -%} nullif({{ expr }}, 'null')
    {%- elif type == 'null' -%} cast(null as string)
    {%- elif type == 'integer' -%}
        case when {{ expr }} rlike '^{{ integer }}$' then try_cast({{ expr }} as bigint)
            when {{ expr }} rlike '^"{{ integer }}"$' then try_cast({{ unquoted }} as bigint) end
    {%- elif type == 'decimal' -%}
        {%- set p = 38 if precision is none else precision -%}
        {%- set s = ([9, p] | min) if scale is none else scale -%}
        {%- set fraction = '([.][0-9]{1,' ~ s ~ '})?' if s > 0 else '' -%}
        case when {{ expr }} rlike '^{{ integer }}$' then try_cast({{ expr }} as decimal({{ p }},{{ s }}))
            when {{ expr }} rlike '^"{{ integer }}{{ fraction }}"$'
                then try_cast({{ unquoted }} as decimal({{ p }},{{ s }})) end
    {%- elif type == 'timestamp' -%}
        case when {{ expr }} rlike '^"{{ year }}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}[.][0-9]{6}Z"$'
            then try_to_timestamp({{ unquoted }}, "yyyy-MM-dd'T'HH:mm:ss.SSSSSSX") end
    {%- elif type == 'date' -%}
        case when {{ expr }} rlike '^"{{ year }}-[0-9]{2}-[0-9]{2}"$' then try_cast({{ unquoted }} as date) end
    {%- elif type == 'bytes' -%}
        case when {{ expr }} rlike '^"([A-Za-z0-9+/]{4})*([A-Za-z0-9+/][AQgw]==|[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=)?"$'
            then unbase64({{ unquoted }}) end
    {%- else -%} {{ exceptions.raise_compiler_error('unknown column type ' ~ type) }}
    {%- endif -%}
{%- endmacro %}


{#- The wall-clock part of an HLC (top 48 bits, Unix milliseconds) as a UTC timestamp; null past
    9999-12-31 (no timestamp holds it). -#}
{% macro lakesync_hlc_to_timestamp(expr) -%}
    case when {{ expr }} < 16606973185228800000
        then timestamp_millis(cast(floor({{ expr }} / 65536) as bigint)) end
{%- endmacro %}


{#- Rows of `rows` (lakesync_row_clocks shape, one table) with the visible cells of `cells`
    (lakesync_cell_winners shape) pivoted into typed columns. A live row shows only cells written
    after its tombstone (docs/protocol.md §4 revival); a row that is not live comes out with _hlc null, which
    the incremental merge turns into a delete. -#}
{% macro lakesync_typed_rows(rows, cells, columns) %}
    select
        r.gateway_id,
        r.row_id,
        {%- for col in columns %}
        {{ lakesync_decode(col['type'], 'v.`' ~ col['name'] ~ '`', col.get('precision'), col.get('scale')) }}
            as `{{ col['name'] }}`,
        {%- endfor %}
        case when r.is_live then r.write_hlc end as _hlc,
        case when r.is_live then {{ lakesync_hlc_to_timestamp('r.write_hlc') }} end as _changed_at,
        r.last_ingest_hlc as _ingest_hlc
    from {{ rows }} r
    left join (
        select
            c.gateway_id,
            c.row_id
            {%- for col in columns %},
            max(case when c.column_name = '{{ col['name'] }}' then c.value_json end)
                as `{{ col['name'] }}`
            {%- endfor %}
        from {{ cells }} c
        inner join {{ rows }} lr
            on c.gateway_id = lr.gateway_id and c.row_id = lr.row_id
        where lr.is_live
            and (lr.delete_hlc is null
                 or {{ lakesync_beats('c.hlc', 'c.client_id', 'lr.delete_hlc', 'lr.delete_client_id') }})
        group by c.gateway_id, c.row_id
    ) v
        on v.gateway_id = r.gateway_id and v.row_id = r.row_id
{% endmacro %}


{#- The body of a generated current-state model. Incremental runs take only rows whose landing
    position moved past this table's; full refreshes take live rows only. -#}
{% macro lakesync_current_state(table_name, columns) %}
with rows_changed as (
    select *
    from {{ ref('int_rows_merged') }}
    where table_name = '{{ table_name }}'
    {%- if is_incremental() %}
        and last_ingest_hlc > {{ lakesync_stored_position('_ingest_hlc') }}
    {%- else %}
        and is_live
    {%- endif %}
),

cells as (
    select *
    from {{ ref('int_cells_merged') }}
    where table_name = '{{ table_name }}'
),

final as (
    {{ lakesync_typed_rows('rows_changed', 'cells', columns) }}
)

select * from final
{% endmacro %}


{#- Time travel by HLC: the table's state from the landing deltas with hlc <= as_of_hlc, computed
    with the same macros as the incremental models. Use via `lakesync pipeline as-of`. -#}
{% macro lakesync_state_as_of(table_name, columns, as_of_hlc) %}
with deltas as (
    select *
    from {{ ref('stg_lakesync__deltas') }}
    where table_name = '{{ table_name }}' and hlc <= {{ as_of_hlc }}
),

cells_in as (
    select *
    from {{ ref('stg_lakesync__cells') }}
    where table_name = '{{ table_name }}' and hlc <= {{ as_of_hlc }}
),

row_state as (
    {{ lakesync_row_clocks('deltas') }}
),

cells as (
    {{ lakesync_cell_winners('cells_in') }}
),

typed as (
    {{ lakesync_typed_rows('row_state', 'cells', columns) }}
),

final as (
    select * from typed where _hlc is not null
)

select * from final
{% endmacro %}
