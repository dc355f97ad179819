-- wsrep_size: the number of nodes in this Galera node's primary component.
SHOW STATUS WHERE Variable_name = 'wsrep_cluster_size';
