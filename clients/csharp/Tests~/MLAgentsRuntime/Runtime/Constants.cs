namespace Unity.MLAgents
{
    /// <summary>
    /// Grouping for use in AddComponentMenu (instead of nesting the menus).
    /// </summary>
    internal enum MenuGroup
    {
        Default = 0,
        Sensors = 50,
        Actuators = 100
    }
}
