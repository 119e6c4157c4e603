"""fronts"""
