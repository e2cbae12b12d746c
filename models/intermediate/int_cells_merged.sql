-- One row per cell (gateway, table, row, column) holding its LWW winner (docs/protocol.md §4). Increments read
-- landing rows past the stored position; the merge only overwrites a stored cell when the new write
-- beats it, so late and duplicate deltas are harmless.
{{
    config(
        unique_key=['gateway_id', 'table_name', 'row_id', 'column_name'],
        merge_update_condition=lakesync_cell_beats('DBT_INTERNAL_SOURCE', 'DBT_INTERNAL_DEST'),
    )
}}

with new_cells as (
    select * from {{ ref('stg_lakesync__cells') }}
    {%- if is_incremental() %}
    where ingest_hlc > {{ lakesync_stored_position('ingest_hlc') }}
    {%- endif %}
),

final as (
    {{ lakesync_cell_winners('new_cells') }}
)

select * from final
