{#- A model's `schema` config is the Iceberg namespace as is (`analytics`, not `lakesync_analytics`). -#}
{% macro generate_schema_name(custom_schema_name, node) -%}
    {{ (custom_schema_name or target.schema) | trim }}
{%- endmacro %}
