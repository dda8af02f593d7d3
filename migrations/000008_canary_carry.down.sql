DROP TABLE canary_groups;
