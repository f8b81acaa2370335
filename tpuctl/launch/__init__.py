"""A launch is data before it is action: Job -> Plan -> Backend handles -> Supervisor."""
