{#- Project-level override of dbt-spark's MERGE: the same statement plus optional conditions from
    model config, because dbt-spark accepts no custom strategy names and its plain merge updates
    every matched row (a late, older write would overwrite a newer one):
      merge_update_condition: `when matched and <cond> then update` (LWW: only if the new write wins)
      merge_delete_condition: `when matched and <cond> then delete` (a row that stopped being live)
      merge_insert_condition: `when not matched and <cond> then insert`
    Conditions refer to DBT_INTERNAL_SOURCE / DBT_INTERNAL_DEST. -#}
{% macro spark__get_merge_sql(target, source, unique_key, dest_columns, incremental_predicates) %}
  {%- set predicates = [] if incremental_predicates is none else [] + incremental_predicates -%}
  {%- set dest_columns = adapter.get_columns_in_relation(target) -%}
  {%- set merge_update_columns = config.get('merge_update_columns') -%}
  {%- set merge_exclude_columns = config.get('merge_exclude_columns') -%}
  {%- set update_columns = get_merge_update_columns(merge_update_columns, merge_exclude_columns, dest_columns) -%}
  {%- set update_condition = config.get('merge_update_condition') -%}
  {%- set delete_condition = config.get('merge_delete_condition') -%}
  {%- set insert_condition = config.get('merge_insert_condition') -%}

  {% if unique_key %}
      {% if unique_key is sequence and unique_key is not mapping and unique_key is not string %}
          {% for key in unique_key %}
              {% do predicates.append('DBT_INTERNAL_SOURCE.' ~ key ~ ' = DBT_INTERNAL_DEST.' ~ key) %}
          {% endfor %}
      {% else %}
          {% do predicates.append('DBT_INTERNAL_SOURCE.' ~ unique_key ~ ' = DBT_INTERNAL_DEST.' ~ unique_key) %}
      {% endif %}
  {% else %}
      {% do predicates.append('FALSE') %}
  {% endif %}

  {{ sql_header if sql_header is not none }}

  merge into {{ target }} as DBT_INTERNAL_DEST
      using {{ source }} as DBT_INTERNAL_SOURCE
      on {{ predicates | join(' and ') }}
      {% if delete_condition %}
      when matched and ({{ delete_condition }}) then delete
      {% endif %}
      when matched {% if update_condition %}and ({{ update_condition }}){% endif %} then update set
        {% if update_columns -%}{%- for column_name in update_columns %}
            {{ column_name }} = DBT_INTERNAL_SOURCE.{{ column_name }}
            {%- if not loop.last %}, {%- endif %}
        {%- endfor %}
        {%- else %} * {% endif %}
      when not matched {% if insert_condition %}and ({{ insert_condition }}){% endif %} then insert *
{% endmacro %}
